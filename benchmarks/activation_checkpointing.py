"""Activation checkpointing off vs on: whole-process peak memory, speed and the estimate's error.

    python benchmarks/activation_checkpointing.py [--json] [--budget-gib 2] [--steps 3]
        [--only maze,sudoku] [--from-json FILE [--reestimate] [--markdown]]

Two shapes: the Maze-Hard attention network at seq_len 900 (specs/maze-hard-att.toml) and the
Sudoku MLP network (specs/sudoku-extreme-mlp.toml, 9x9: seq_len 81). For each, rows in this
order, each in a fresh child process:

1. off and on at the same micro-batch (``--same-micro``, per shape);
2. off and on at the largest micro-batch whose estimate fits ``--budget-gib`` (the estimator's
   total for the whole process, as the tiers plan it, without their margin).

The child builds the model, optimizers and EMA as ``trm run`` does, on a synthetic global
batch of one micro-batch, and takes ``--steps`` optimizer steps with the loop's own
:func:`trm.loop.step.accumulate_gradients` (then the carry write-back, the optimizer steps,
the EMA update). Precision float32, eager (no torch.compile), 2 threads, freed host memory
kept for reuse as trm run does on Linux/glibc.

- peak: the child's whole-process maximum resident size, measured from outside: the
  kernel's ``ru_maxrss`` for that child (``os.wait4``), everything included (interpreter,
  torch, the model, the step);
- samples/s: rows of the steps after the first (warm-up) over their wall time;
- estimate: the built-in estimator's total for the same spec, with the child's own resident
  size before the model is built as the "process baseline" item (the interpreter, torch, the
  batch), the data-loader item left out (no dataset file), error = estimate / peak - 1;
- saving: 1 - peak(on) / peak(off) at the same micro-batch; speed cost: 1 - samples/s(on) /
  samples/s(off) at the same micro-batch.

The table also names the largest micro-batch that fits an 8 GiB budget each way (the
estimate only: measuring it at seq_len 900 on a 2-core CPU would take hours). Wall-clock
figures depend on what else runs on the machine: say so when quoting them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import provenance

GIB = 2**30
SHAPES = {
    # name: (shipped spec, seq_len, vocab, the micro-batch both settings run at)
    "maze": ("maze-hard-att", 900, 6, 2),
    "sudoku": ("sudoku-extreme-mlp", 81, 11, 8),
}
PREDICTED_ONLY_BUDGET_GIB = 8.0
LEFT_OUT = {"data-loader buffers"}


def spec_for(shape: str, micro: int, setting: str, steps: int) -> Any:
    """The shipped spec of ``shape`` at one micro-batch of ``micro`` rows a step, float32,
    eager, with ``runtime.activation_checkpointing = setting``."""
    import attrs

    from trm.spec import load_spec, resolve_spec_path

    spec = load_spec(resolve_spec_path(SHAPES[shape][0]))
    train = attrs.evolve(spec.train, global_batch_size=micro, max_steps=steps, epochs=0)
    runtime = attrs.evolve(
        spec.runtime,
        device="cpu",
        precision="fp32",
        threads=2,
        compile="off",
        micro_batch_size=micro,
        activation_checkpointing=setting,
    )
    return attrs.evolve(spec, train=train, runtime=runtime)


def dataset_of(shape: str) -> Any:
    from trm.data.shape import DatasetShape

    _, seq_len, vocab, _ = SHAPES[shape]
    return DatasetShape(seq_len, vocab, 1)


def estimate_bytes(shape: str, micro: int, setting: str, baseline_bytes: int) -> dict[str, int]:
    """The estimator's items (less the data loader's) for one row, by name."""
    from trm.hardware import HardwareProfile
    from trm.plugins.planning.memory_estimator import estimate_items
    from trm.runtime import RuntimeChoice

    runtime = RuntimeChoice("cpu", "fp32", 2, False, reuse_host_memory=True)
    items = estimate_items(
        spec_for(shape, micro, setting, 1),
        HardwareProfile(),
        runtime,
        dataset_of(shape),
        process_baseline_bytes=baseline_bytes,
    )
    return {item.name: item.bytes for item in items if item.name not in LEFT_OUT}


def largest_fitting(shape: str, setting: str, budget_bytes: int, baseline_bytes: int) -> int:
    """The largest micro-batch (1-4096) whose estimate stays within ``budget_bytes``."""
    low, high = 0, 4096
    while low < high:
        middle = (low + high + 1) // 2
        if sum(estimate_bytes(shape, middle, setting, baseline_bytes).values()) <= budget_bytes:
            low = middle
        else:
            high = middle - 1
    return low


# ----------------------------------------------------------------------------- child


def child(config: dict[str, Any]) -> dict[str, Any]:
    """Train ``config["steps"]`` steps of one row; returns its speed and estimate."""
    import numpy as np
    import psutil
    import torch

    from trm.device.contract import host_placement
    from trm.device.host_memory import reuse_freed_memory
    from trm.loop.step import accumulate_gradients
    from trm.model import EMA, TinyRecursiveModel, build_optimizers

    torch.set_num_threads(2)
    reuse_freed_memory()
    shape, micro, setting = config["shape"], config["micro"], config["setting"]
    spec = spec_for(shape, micro, setting, config["steps"])
    _, seq_len, vocab, _ = SHAPES[shape]
    rng = np.random.default_rng(0)
    batch = {
        "inputs": torch.from_numpy(rng.integers(1, vocab, (micro, seq_len))),
        "labels": torch.from_numpy(rng.integers(2, vocab, (micro, seq_len))),
        "puzzle_identifiers": torch.zeros(micro, dtype=torch.long),
    }
    baseline = psutil.Process().memory_info().rss
    torch.manual_seed(0)
    model = TinyRecursiveModel(spec.arch, seq_len, vocab, 1).train()
    model.set_activation_checkpointing(setting == "on")
    optimizers = build_optimizers(model, spec.train)
    ema = EMA(model, spec.train.ema_rate)
    carry = model.initial_carry(batch)
    placement = host_placement()
    device = placement.device
    seconds = []
    for _ in range(config["steps"]):
        started = time.perf_counter()
        min_halt = model.draw_min_halt_steps(micro, device)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        pieces, _sums = accumulate_gradients(
            model,
            carry,
            batch,
            min_halt_steps=min_halt,
            micro_batch_size=micro,
            loss=spec.arch.loss,
            divisor=micro,
            placement=placement,
        )
        for rows, new_carry in pieces:
            carry.assign_rows(rows, new_carry)
        del pieces
        for opt in optimizers:
            opt.step()
        ema.update(model)
        seconds.append(time.perf_counter() - started)
    timed = seconds[1:] or seconds
    return {
        "samples_per_s": micro * len(timed) / sum(timed),
        "step_s": seconds,
        "baseline_bytes": baseline,
    }


# ----------------------------------------------------------------------------- parent


def run_row(shape: str, micro: int, setting: str, steps: int) -> dict[str, Any]:
    """One row in a fresh process; its peak RSS from the kernel's accounting of the child."""
    config = {"shape": shape, "micro": micro, "setting": setting, "steps": steps}
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(config)],
            stdout=out,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        _pid, status, usage = os.wait4(proc.pid, 0)  # the kernel's account of the child
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    row: dict[str, Any] = {"shape": shape, "micro_batch": micro, "checkpointing": setting}
    if proc.returncode != 0:
        row["error"] = (stderr.strip().splitlines() or ["failed"])[-1]
        return row
    result = json.loads(stdout.strip().splitlines()[-1])
    row.update(
        peak_rss_bytes=usage.ru_maxrss * 1024,  # KiB on Linux
        samples_per_s=round(result["samples_per_s"], 4),
        step_s=[round(s, 2) for s in result["step_s"]],
        baseline_bytes=result["baseline_bytes"],
        wall_s=round(time.perf_counter() - started, 1),
    )
    return add_estimate(row)


def add_estimate(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the estimator's figures for it (this process's estimator, the child's
    baseline): the total, its error against the measured peak, the two activation items."""
    items = estimate_bytes(
        row["shape"], row["micro_batch"], row["checkpointing"], row["baseline_bytes"]
    )
    estimate = sum(items.values())
    row.update(
        estimate_bytes=estimate,
        estimate_error=round(estimate / row["peak_rss_bytes"] - 1, 4),
        activations_bytes=items.get("activations", 0),
        recomputed_call_bytes=items.get("recomputed call", 0),
    )
    return row


def compare(rows: list[dict[str, Any]]) -> None:
    """Add each "on" row's saving and speed cost against the "off" row of its micro-batch."""
    by_key = {(r["shape"], r["micro_batch"], r["checkpointing"]): r for r in rows}
    for row in rows:
        off = by_key.get((row["shape"], row["micro_batch"], "off"))
        if row["checkpointing"] != "on" or off is None or "error" in row or "error" in off:
            continue
        row["saving_vs_off"] = round(1 - row["peak_rss_bytes"] / off["peak_rss_bytes"], 4)
        row["activation_saving_bytes"] = (
            off["activations_bytes"] - row["activations_bytes"] - row["recomputed_call_bytes"]
        )
        row["speed_cost_vs_off"] = round(1 - row["samples_per_s"] / off["samples_per_s"], 4)


def machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import psutil

    budget = int(args.budget_gib * GIB)
    baseline = psutil.Process().memory_info().rss  # a stand-in until a child reports its own
    shapes = [s for s in args.only.split(",") if s]
    rows: list[dict[str, Any]] = []
    fits: list[dict[str, Any]] = []
    for shape in shapes:
        same = SHAPES[shape][3]
        plan = [(same, "off"), (same, "on")]
        fit = {"shape": shape, "budget_bytes": budget}
        for setting in ("off", "on"):
            fit[f"largest_micro_batch_{setting}"] = largest_fitting(
                shape, setting, budget, baseline
            )
            fit[f"largest_micro_batch_{setting}_8gib"] = largest_fitting(
                shape, setting, int(PREDICTED_ONLY_BUDGET_GIB * GIB), baseline
            )
            plan.append((fit[f"largest_micro_batch_{setting}"], setting))
        fits.append(fit)
        for micro, setting in dict.fromkeys(plan):
            row = run_row(shape, micro, setting, args.steps)
            rows.append(row)
            if not args.json:
                print(json.dumps(row), file=sys.stderr)
    compare(rows)
    for fit in fits:
        for setting in ("off", "on"):
            micro = fit[f"largest_micro_batch_{setting}"]
            match = [
                r
                for r in rows
                if (r["shape"], r["micro_batch"], r["checkpointing"])
                == (fit["shape"], micro, setting)
            ]
            if match and "samples_per_s" in match[0]:
                fit[f"samples_per_s_{setting}"] = match[0]["samples_per_s"]
    return {
        "machine": machine(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": 2,
        "precision": "fp32",
        "compiled": False,
        "steps": args.steps,
        "rows": rows,
        "budget_fits": fits,
    }


def table(document: dict[str, Any], markdown: bool = False) -> str:
    """The rows and the budget fits as text (markdown with ``markdown``)."""
    head = [
        "shape",
        "micro",
        "ckpt",
        "peak RSS GiB",
        "estimate GiB",
        "error",
        "samples/s",
        "peak saved",
        "speed cost",
    ]
    lines = []
    for row in document["rows"]:
        if "error" in row:
            lines.append(
                [row["shape"], str(row["micro_batch"]), row["checkpointing"], row["error"]]
            )
            continue
        lines.append(
            [
                row["shape"],
                str(row["micro_batch"]),
                row["checkpointing"],
                f"{row['peak_rss_bytes'] / GIB:.2f}",
                f"{row['estimate_bytes'] / GIB:.2f}",
                f"{row['estimate_error']:+.1%}",
                f"{row['samples_per_s']:.4f}",
                _saving(row, document["rows"]),
                f"{row['speed_cost_vs_off']:+.0%}" if "speed_cost_vs_off" in row else "",
            ]
        )
    fit_head = [
        "shape",
        "budget",
        "largest micro off",
        "on",
        "samples/s off",
        "on",
        "8 GiB: off",
        "on",
    ]
    fit_lines = [
        [
            fit["shape"],
            f"{fit['budget_bytes'] / GIB:g} GiB",
            str(fit["largest_micro_batch_off"]),
            str(fit["largest_micro_batch_on"]),
            _rate(fit.get("samples_per_s_off")),
            _rate(fit.get("samples_per_s_on")),
            str(fit["largest_micro_batch_off_8gib"]),
            str(fit["largest_micro_batch_on_8gib"]),
        ]
        for fit in document["budget_fits"]
    ]
    title = (
        f"{document['machine']}, {document['torch_threads']} threads, "
        f"{document['precision']}, eager, {document['steps']} steps a row"
    )
    return (
        title
        + "\n\n"
        + _grid(head, lines, markdown)
        + "\n\n"
        + _grid(fit_head, fit_lines, markdown)
    )


def _rate(samples_per_s: float | None) -> str:
    return "–" if samples_per_s is None else f"{samples_per_s:.4f}"


def _saving(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Measured peak saved against the "off" row of the same micro-batch: MiB and share."""
    if "saving_vs_off" not in row:
        return ""
    off = next(
        r
        for r in rows
        if (r["shape"], r["micro_batch"], r["checkpointing"])
        == (row["shape"], row["micro_batch"], "off")
    )
    saved_mib = (off["peak_rss_bytes"] - row["peak_rss_bytes"]) / 2**20
    return f"{saved_mib:.0f} MiB ({row['saving_vs_off']:.0%})"


def _grid(head: list[str], lines: list[list[str]], markdown: bool) -> str:
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(x[i]) for x in [head, *lines] if i < len(x)) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) for line in [head, *lines]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--budget-gib", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", default="maze,sudoku", help="shapes, comma-separated")
    parser.add_argument("--from-json", type=Path, help="print the table of a saved document")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--reestimate",
        action="store_true",
        help="with --from-json: recompute the estimates of the saved rows with this estimator",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.from_json:
        document = json.loads(args.from_json.read_text())
        if args.reestimate:  # the saved measurements against this checkout's estimator
            document["rows"] = [add_estimate(r) for r in document["rows"] if "error" not in r]
            compare(document["rows"])
        print(json.dumps(document, indent=2) if args.json else table(document, args.markdown))
        return
    unknown = [s for s in args.only.split(",") if s and s not in SHAPES]
    if unknown:
        parser.error(
            f"--only: unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}"
        )
    document = measure(args) | {"provenance": provenance()}
    print(json.dumps(document, indent=2) if args.json else table(document, args.markdown))


if __name__ == "__main__":
    main()
