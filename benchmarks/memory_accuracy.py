"""Predicted vs measured peak memory of a TRM training step, over a grid of configurations.

    python benchmarks/memory_accuracy.py [--json] [--device cpu|cuda] [--only N,M]
        [--emulated-bf16] [--from-json FILE [--markdown]] [--repredict FILE [--json]]

(``--from-json`` prints the table of a document an earlier ``--json`` run saved, as
markdown with ``--markdown``, without measuring again. ``--repredict FILE`` scores this
checkout's estimator against a saved document's measurements, e.g. of a machine not at hand.)

Each row runs in a fresh subprocess (so no allocator state, cache or page carries over):

1. import torch and trm, set the threads, make the synthetic global batch (numpy, as the
   loader would hand it over);
2. baseline: read ``VmRSS`` from /proc/self/status, then reset the kernel's high-water mark
   by writing ``5`` to /proc/self/clear_refs (Linux >= 4.0), so ``VmHWM`` afterwards is the
   peak *since the baseline*. Where clear_refs cannot be written, a thread samples the RSS
   every millisecond instead (psutil) and its maximum is used (the method is reported);
3. build the model, optimizers and EMA exactly as ``trm run`` does, and run two optimizer
   steps with the loop's own :func:`trm.loop.step.accumulate_gradients` (over the row's
   micro-batches of its global batch) followed by the carry write-back, the optimizer steps
   and the EMA update. The second step is the peak: the optimizer moments exist by then;
4. measured = ``VmHWM`` - baseline RSS (CPU); on CUDA ``torch.cuda.max_memory_allocated``
   after ``reset_peak_memory_stats`` (the caching allocator's live bytes; the CUDA context
   is outside it).

Predicted = the sum of the estimator's items for the same spec, less the items that the
measurement leaves out by construction: "process baseline" (before the baseline) and
"data-loader buffers" (the benchmark's batch is made before the baseline and no dataset file
is mapped); on CUDA also "CUDA context" and "allocator fragmentation" (reserved, not
allocated). Error = predicted / measured - 1. The goal is |error| <= 10% on every row.

On a CPU without native bf16 products (no AVX-512 BF16 or AMX) the bf16 rows are skipped and
listed as such: emulated bf16 matrix products run about 100x slower than fp32 there (1 vs
150 GFLOP/s measured on a Zen 3 EPYC), so one row would take hours. ``--emulated-bf16`` runs
them anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from provenance import provenance

GOAL = 0.10
SEQ_LEN, VOCAB = 81, 11  # 9x9 Sudoku, the shape of every row that names no other

# (label, arch overrides, batch, precision[, compiled[, shape]]); at least 20 rows over batch
# 1-512, hidden 64-512, cycles, attention and mlp_t, fp32 and bf16. ``batch`` is the micro-
# batch; ``shape`` (a dict) may set ``seq_len``, ``vocab``, ``identifiers`` (puzzle
# identifiers, drawn at random per row) and ``global_batch`` (default: the micro-batch; when
# larger, the step runs over several micro-batches and the carry holds the whole global batch)
# and ``reuse`` (False: glibc returns large freed blocks to the system, as with
# ``runtime.host_memory = "system"``; default: freed memory kept for reuse, as trm run does).
_SMALL = {"puzzle_emb_ndim": 0, "puzzle_emb_len": 1}
# specs/maze-hard-att.toml's network (ArchSpec's defaults give its 16-token puzzle prefix)
_MAZE = {"hidden_size": 512, "num_heads": 8, "L_layers": 2, "H_cycles": 3, "L_cycles": 4}
_MAZE_DATA = {"seq_len": 900, "vocab": 6, "identifiers": 1}
_ARC_DATA = {"seq_len": 900, "vocab": 12, "identifiers": 10_000}
# specs/quickstart.toml's network and data shape (4x4 Sudoku: 16 cells, 6 tokens)
_QUICK = {
    "num_heads": 4,
    "H_cycles": 2,
    "L_cycles": 3,
    "mlp_t": True,
    "halt_max_steps": 4,
    "halt_exploration_prob": 0.1,
    **_SMALL,
}
_QUICK_DATA = {"seq_len": 16, "vocab": 6, "identifiers": 1}
GRID: list[tuple[Any, ...]] = [
    ("mlp h64 b1", {"hidden_size": 64, "num_heads": 4, "mlp_t": True, **_SMALL}, 1, "fp32"),
    ("mlp h64 b64", {"hidden_size": 64, "num_heads": 4, "mlp_t": True, **_SMALL}, 64, "fp32"),
    (
        "mlp h64 b512 H2L3",
        {"hidden_size": 64, "num_heads": 4, "mlp_t": True, "H_cycles": 2, "L_cycles": 3, **_SMALL},
        512,
        "fp32",
    ),
    (
        "mlp h64 b512 bf16",
        {"hidden_size": 64, "num_heads": 4, "mlp_t": True, **_SMALL},
        512,
        "bf16",
    ),
    ("mlp h128 b32", {"hidden_size": 128, "num_heads": 4, "mlp_t": True, **_SMALL}, 32, "fp32"),
    (
        "mlp h128 b128 bf16",
        {"hidden_size": 128, "num_heads": 4, "mlp_t": True, **_SMALL},
        128,
        "bf16",
    ),
    ("mlp h256 b8", {"hidden_size": 256, "num_heads": 4, "mlp_t": True}, 8, "fp32"),
    (
        "mlp h256 b32 L3",
        {"hidden_size": 256, "num_heads": 4, "mlp_t": True, "L_cycles": 3},
        32,
        "bf16",
    ),
    ("mlp h512 b1", {"hidden_size": 512, "mlp_t": True}, 1, "fp32"),
    ("mlp h512 b4 bf16", {"hidden_size": 512, "mlp_t": True}, 4, "bf16"),
    ("mlp h512 b16", {"hidden_size": 512, "mlp_t": True}, 16, "fp32"),
    ("mlp h512 b32 bf16", {"hidden_size": 512, "mlp_t": True}, 32, "bf16"),
    ("att h64 b1", {"hidden_size": 64, "num_heads": 4, **_SMALL}, 1, "fp32"),
    ("att h64 b128", {"hidden_size": 64, "num_heads": 4, **_SMALL}, 128, "fp32"),
    (
        "att h64 b512 H2L2",
        {"hidden_size": 64, "num_heads": 4, "H_cycles": 2, "L_cycles": 2, **_SMALL},
        512,
        "fp32",
    ),
    ("att h128 b64 bf16", {"hidden_size": 128, "num_heads": 4, **_SMALL}, 64, "bf16"),
    (
        "att h128 b256 learned",
        {"hidden_size": 128, "num_heads": 4, "pos_encodings": "learned", **_SMALL},
        256,
        "bf16",
    ),
    ("att h256 b16", {"hidden_size": 256, "num_heads": 4}, 16, "fp32"),
    ("att h256 b64 bf16", {"hidden_size": 256, "num_heads": 4}, 64, "bf16"),
    ("att h512 b2", {"hidden_size": 512}, 2, "fp32"),
    ("att h512 b16 bf16", {"hidden_size": 512}, 16, "bf16"),
    ("att h512 b32 L3 bf16", {"hidden_size": 512, "L_cycles": 3}, 32, "bf16"),
    # torch.compile (Inductor) keeps a different set of tensors: rows with the compile flag
    ("mlp h512 b16 bf16 comp", {"hidden_size": 512, "mlp_t": True}, 16, "bf16", True),
    ("mlp h256 b32 comp", {"hidden_size": 256, "num_heads": 4, "mlp_t": True}, 32, "fp32", True),
    ("att h512 b16 bf16 comp", {"hidden_size": 512}, 16, "bf16", True),
    ("att h256 b16 comp", {"hidden_size": 256, "num_heads": 4}, 16, "fp32", True),
    ("mlp h512 b96 bf16 comp", {"hidden_size": 512, "mlp_t": True}, 96, "bf16", True),
    ("mlp h512 b64 comp", {"hidden_size": 512, "mlp_t": True}, 64, "fp32", True),
    # eager fp32 with most activations in tensors over glibc's mmap threshold
    ("mlp h512 b64", {"hidden_size": 512, "mlp_t": True}, 64, "fp32"),
    ("att h512 b32", {"hidden_size": 512}, 32, "fp32"),
    # several micro-batches per step (the carry holds the whole global batch), Sudoku shape
    ("att h512 b16/64 bf16 comp", {"hidden_size": 512}, 16, "bf16", True, {"global_batch": 64}),
    (
        "mlp h512 b32/128 bf16 comp",
        {"hidden_size": 512, "mlp_t": True},
        32,
        "bf16",
        True,
        {"global_batch": 128},
    ),
    # seq_len 900 (30x30 grids), where attention costs 100x more per row than at 81: the
    # Maze-Hard shape (specs/maze-hard-att.toml: vocab 6, one identifier, hidden 512, RoPE,
    # H3 L4) and the ARC shape (vocab 12, the 16-token prefix from 10,000 identifiers), each
    # micro-batch one of several in a larger global batch
    ("maze b2/8", _MAZE, 2, "fp32", False, {**_MAZE_DATA, "global_batch": 8}),
    ("maze b8/24", _MAZE, 8, "fp32", False, {**_MAZE_DATA, "global_batch": 24}),
    ("maze b2/8 bf16", _MAZE, 2, "bf16", False, {**_MAZE_DATA, "global_batch": 8}),
    ("maze b8/24 bf16", _MAZE, 8, "bf16", False, {**_MAZE_DATA, "global_batch": 24}),
    ("maze b8/24 comp", _MAZE, 8, "fp32", True, {**_MAZE_DATA, "global_batch": 24}),
    ("maze b2/8 bf16 comp", _MAZE, 2, "bf16", True, {**_MAZE_DATA, "global_batch": 8}),
    ("maze b8/24 bf16 comp", _MAZE, 8, "bf16", True, {**_MAZE_DATA, "global_batch": 24}),
    ("maze b16/32 bf16 comp", _MAZE, 16, "bf16", True, {**_MAZE_DATA, "global_batch": 32}),
    ("arc b4/12 bf16", _MAZE, 4, "bf16", False, {**_ARC_DATA, "global_batch": 12}),
    ("arc b8/24 bf16 comp", _MAZE, 8, "bf16", True, {**_ARC_DATA, "global_batch": 24}),
    (
        "maze b8/24 bf16 comp system",
        _MAZE,
        8,
        "bf16",
        True,
        {**_MAZE_DATA, "global_batch": 24, "reuse": False},
    ),
    # specs/quickstart.toml's network (4x4 Sudoku) widened to hidden 256 and 512, batch 64,
    # in both precisions: the shapes of docs/hardware.md's whole-process check
    ("quick h256 b64", {**_QUICK, "hidden_size": 256}, 64, "fp32", False, _QUICK_DATA),
    ("quick h512 b64", {**_QUICK, "hidden_size": 512}, 64, "fp32", False, _QUICK_DATA),
    ("quick h256 b64 bf16", {**_QUICK, "hidden_size": 256}, 64, "bf16", False, _QUICK_DATA),
    ("quick h512 b64 bf16", {**_QUICK, "hidden_size": 512}, 64, "bf16", False, _QUICK_DATA),
]


def row_config(index: int, device: str) -> dict[str, Any]:
    """Row ``index`` of GRID as the child's configuration (JSON-ready)."""
    label, arch, batch, precision, *flags = GRID[index]
    compiled = bool(flags and flags[0])
    shape = flags[1] if len(flags) > 1 else {}
    return {
        "label": label,
        "arch": arch,
        "batch": batch,
        "global_batch": shape.get("global_batch", batch),
        "seq_len": shape.get("seq_len", SEQ_LEN),
        "vocab": shape.get("vocab", VOCAB),
        "identifiers": shape.get("identifiers", 1),
        "precision": precision,
        "device": device,
        "compile": compiled,
        "reuse": shape.get("reuse", True),
    }


def build_spec(config: dict[str, Any]) -> Any:
    from trm.spec import ArchSpec, RunSpec, RuntimeSpec, TrainSpec

    return RunSpec(
        name="memory-accuracy",
        arch=ArchSpec(**config["arch"]),
        train=TrainSpec(global_batch_size=config["global_batch"], max_steps=2, ema=True),
        runtime=RuntimeSpec(
            device="cpu",
            precision=config["precision"],
            compile="on" if config["compile"] else "off",
            micro_batch_size=config["batch"],
        ),
    )


def dataset_shape(config: dict[str, Any]) -> Any:
    from trm.data.shape import DatasetShape

    return DatasetShape(config["seq_len"], config["vocab"], config["identifiers"])


def predicted_bytes(config: dict[str, Any], reuse: bool = False) -> tuple[int, dict[str, int]]:
    """Estimator total for the row, less the items the measurement leaves out; ``reuse``:
    the child kept freed host memory for reuse (trm.device.host_memory), as trm run does."""
    from trm.hardware import HardwareProfile
    from trm.plugins.planning.memory_estimator import estimate_items
    from trm.runtime import RuntimeChoice

    device, compiled = config["device"], config["compile"]
    runtime = RuntimeChoice(
        device=device,
        precision=config["precision"],
        threads=2,
        compile=compiled,
        reuse_host_memory=reuse,
    )
    items = estimate_items(
        build_spec(config),
        HardwareProfile(),
        runtime,
        dataset_shape(config),
        process_baseline_bytes=0,
    )
    left_out = {"process baseline", "data-loader buffers"}
    if device == "cuda":
        left_out |= {"CUDA context", "allocator fragmentation"}
    location = "device" if device == "cuda" else "host"
    kept = {i.name: i.bytes for i in items if i.name not in left_out and i.location == location}
    return sum(kept.values()), kept


# ----------------------------------------------------------------------------- child


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class _Sampler:
    """Fallback peak finder: samples this process's RSS every millisecond."""

    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.001)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.peak, self.process.memory_info().rss)


def child(config: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    from trm.device.compile import compile_network
    from trm.device.host_memory import idle_heap_bytes, reuse_freed_memory
    from trm.loop.step import accumulate_gradients
    from trm.model import EMA, TinyRecursiveModel, build_optimizers
    from trm.runtime import RuntimeChoice

    torch.set_num_threads(2)
    device = torch.device(config["device"])
    compiled = bool(config.get("compile"))
    spec = build_spec(config)
    micro, batch_size = config["batch"], config["global_batch"]
    seq_len, vocab, identifiers = config["seq_len"], config["vocab"], config["identifiers"]
    rng = np.random.default_rng(0)
    batch_np = {
        "inputs": rng.integers(1, vocab, (batch_size, seq_len)),
        "labels": rng.integers(2, vocab, (batch_size, seq_len)),
        "puzzle_identifiers": rng.integers(0, identifiers, batch_size),
    }
    # as trm run does on a CPU (the cpu plugin's choice, applied when the loop starts)
    reuse = device.type == "cpu" and config.get("reuse", True) and reuse_freed_memory()
    runtime = RuntimeChoice(str(device), config["precision"], 2, compiled, reuse_host_memory=reuse)
    placement = runtime.placement()
    method = "VmHWM after clear_refs"
    sampler = None
    if device.type == "cuda":
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        method = "cuda max_memory_allocated"
    else:
        start = _status_kib("VmRSS") * 1024
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            sampler = _Sampler()
            method = "RSS sampled every 1 ms (psutil)"

    model = TinyRecursiveModel(spec.arch, seq_len, vocab, identifiers).to(device)
    model.train()
    if compiled:  # as trm run does
        compile_network(model, runtime.backend)
    optimizers = build_optimizers(model, spec.train)
    ema = EMA(model, spec.train.ema_rate)
    device_batch = placement.to_device(batch_np)
    carry = model.initial_carry(device_batch)
    for _ in range(2):
        min_halt = model.draw_min_halt_steps(batch_size, device)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        pieces, _sums = accumulate_gradients(
            model,
            carry,
            device_batch,
            min_halt_steps=min_halt,
            micro_batch_size=micro,
            loss=spec.arch.loss,
            divisor=batch_size,
            placement=placement,
        )
        for rows, new_carry in pieces:
            carry.assign_rows(rows, new_carry)
        del pieces
        for opt in optimizers:
            opt.step()
        ema.update(model)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        measured = torch.cuda.max_memory_allocated(device) - start
    elif sampler is not None:
        measured = sampler.stop() - start
    else:
        measured = _status_kib("VmHWM") * 1024 - start
    # free bytes the C library's heap holds at the end (glibc only): where memory is reused,
    # at least this much of the peak was heap slack rather than live tensors
    return {
        "measured_bytes": int(measured),
        "method": method,
        "host_memory_reuse": reuse,
        "heap_idle_bytes": idle_heap_bytes(),
    }


# ----------------------------------------------------------------------------- parent


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively, as trm's hardware profile sees it."""
    from trm.plugins.planning.system import detect

    return bool(detect().cpu_native_bf16)


def run_row(index: int, device: str) -> dict[str, Any]:
    return run_config(row_config(index, device))


def run_config(config: dict[str, Any]) -> dict[str, Any]:
    """Measure one configuration (see :func:`row_config`) in a fresh process."""
    label, batch, arch = config["label"], config["batch"], config["arch"]
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(config)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    if proc.returncode != 0:
        return {"label": label, "error": proc.stderr.strip().splitlines()[-1:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    reuse = bool(result.get("host_memory_reuse"))
    predicted, items = predicted_bytes(config, reuse)
    measured = result["measured_bytes"]
    return {
        "label": label,
        "batch": batch,
        "global_batch": config["global_batch"],
        "seq_len": config["seq_len"],
        "vocab": config["vocab"],
        "identifiers": config["identifiers"],
        "hidden": arch.get("hidden_size", 512),
        "variant": "mlp_t" if arch.get("mlp_t") else "attention",
        "precision": config["precision"],
        "compiled": config["compile"],
        "predicted_bytes": predicted,
        "measured_bytes": measured,
        "error": predicted / measured - 1.0 if measured > 0 else None,
        "method": result["method"],
        "host_memory_reuse": reuse,
        "heap_idle_bytes": result.get("heap_idle_bytes"),
        "seconds": round(time.perf_counter() - started, 1),
        "items": items,
    }


def print_saved(summary: dict[str, Any], markdown: bool) -> None:
    """The rows of a saved ``--json`` document, aligned or as markdown table rows."""
    if markdown:
        print("| row | precision | compiled | predicted MiB | measured MiB | error |")
        print("|---|---|---|---|---|---|")
    for row in summary["rows"]:
        if row.get("measured_bytes") is None:
            print(f"{row['label']}: failed {row.get('error')}")
            continue
        compiled = "yes" if row.get("compiled", row["label"].endswith(" comp")) else "no"
        cells = (
            row["label"],
            row["precision"],
            compiled,
            f"{row['predicted_bytes'] / 2**20:.1f}",
            f"{row['measured_bytes'] / 2**20:.1f}",
            f"{row['error']:+.1%}",
        )
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    skipped = summary.get("skipped_no_native_bf16") or []
    print(
        f"{summary['within_goal']}/{summary['total']} rows within ±{summary['goal']:.0%}"
        + (f"; skipped (no native bf16): {len(skipped)}" if skipped else "")
    )


def repredicted(saved: dict[str, Any], source: str) -> dict[str, Any]:
    """``saved`` (a ``--json`` document) with every measured row predicted again by this
    checkout's estimator: the measurements are the saved ones (so a document measured on a
    machine not at hand scores today's estimator); each row keeps its saved prediction and
    error beside the new ones. Rows whose label is no longer in :data:`GRID` are dropped."""
    index_of = {entry[0]: index for index, entry in enumerate(GRID)}
    rows = []
    for row in saved["rows"]:
        if row.get("measured_bytes") is None or row["label"] not in index_of:
            continue
        config = row_config(index_of[row["label"]], saved.get("device", "cpu"))
        predicted, items = predicted_bytes(config, reuse=bool(row.get("host_memory_reuse")))
        rows.append(
            {
                **row,
                "saved_predicted_bytes": row["predicted_bytes"],
                "saved_error": row["error"],
                "predicted_bytes": predicted,
                "error": predicted / row["measured_bytes"] - 1,
                "items": items,
            }
        )
    ok = [r for r in rows if abs(r["error"]) <= GOAL]
    return {
        "device": saved.get("device", "cpu"),
        "goal": GOAL,
        "rows": rows,
        "within_goal": len(ok),
        "total": len(rows),
        "repredicted_from": {"file": source, "provenance": saved.get("provenance")},
        "provenance": provenance(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--only", help="comma-separated row numbers (0-based)")
    parser.add_argument(
        "--emulated-bf16",
        action="store_true",
        help="run the bf16 rows on a CPU without native bf16 too (hours)",
    )
    parser.add_argument("--from-json", metavar="FILE", help="table of a saved --json document")
    parser.add_argument("--markdown", action="store_true", help="with --from-json: markdown")
    parser.add_argument(
        "--repredict",
        metavar="FILE",
        help="a saved --json document's measurements against this checkout's predictions",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as saved:
            print_saved(json.load(saved), args.markdown)
        return 0
    if args.repredict:
        with open(args.repredict, encoding="utf-8") as saved:
            document = repredicted(json.load(saved), args.repredict)
        if args.json:
            print(json.dumps(document, indent=2))
        else:
            print_saved(document, markdown=False)
        return 0
    indices = [int(i) for i in args.only.split(",")] if args.only else range(len(GRID))
    skipped = []
    if args.device == "cpu" and not args.emulated_bf16 and not cpu_has_native_bf16():
        skipped = [GRID[i][0] for i in indices if GRID[i][3] == "bf16"]
        indices = [i for i in indices if GRID[i][3] != "bf16"]
        if skipped and not args.json:
            print(f"skipped (no native bf16 on this CPU): {', '.join(skipped)}", flush=True)
    rows = []
    for index in indices:
        row = run_row(index, args.device)
        rows.append(row)
        if not args.json:
            if "error" in row and row.get("measured_bytes") is None:
                print(f"{row['label']:<24} failed: {row['error']}", flush=True)
                continue
            predicted_mib = row["predicted_bytes"] / 2**20
            print(
                f"{row['label']:<24} {row['precision']:<5} pred {predicted_mib:9.1f}"
                f" MiB  meas {row['measured_bytes'] / 2**20:9.1f} MiB  err {row['error']:+7.1%}"
                f"  {'ok' if abs(row['error']) <= GOAL else 'MISS'}",
                flush=True,
            )
    ok = [r for r in rows if r.get("measured_bytes") and abs(r["error"]) <= GOAL]
    summary = {
        "device": args.device,
        "goal": GOAL,
        "rows": rows,
        "within_goal": len(ok),
        "total": len(rows),
        "skipped_no_native_bf16": skipped,
        "provenance": provenance(),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        worst = max((abs(r["error"]) for r in rows if r.get("measured_bytes")), default=0.0)
        print(f"{len(ok)}/{len(rows)} rows within ±{GOAL:.0%}; worst |error| {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
