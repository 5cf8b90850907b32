"""Where a training step's time goes: trm's step profiled by operator, at the paper's shapes.

    python benchmarks/step_profile.py [--only sudoku,maze] [--batch N] [--threads N]
        [--steps N] [--json] [--out FILE]

Shapes: the Sudoku MLP network (specs/sudoku-extreme-mlp.toml, 81 cells, batch 32 by default)
and the Maze-Hard attention network (specs/maze-hard-att.toml, 900 cells, batch 4 by default: a
step at batch 32 takes minutes on a 2-core CPU, and per sample the products are the same
once they are this large). For each, the model, optimizers and EMA are built as ``trm run``
builds them; the recursion region is compiled (as a run compiles it) and the step runs under
bf16 autocast where the CPU has native bf16 (fp32 otherwise), with freed host memory kept for
reuse as the CPU backend does. A step is the loop's own:
:func:`trm.loop.step.accumulate_gradients`, the carry write-back, the optimizer steps and the
EMA update, on one synthetic batch. Two untimed steps compile;
then ``--steps`` steps are profiled with ``torch.profiler`` (CPU, with shapes).

Per shape the document holds:

- ``groups``: self time of the profiled steps by kind, as a share of all self time: matrix
  products (``aten::mm``/``addmm``/``bmm`` and the attention kernels), the compiled network's
  fused elementwise kernels (the self time of Inductor's compiled graphs: the RMS norms,
  SiLU products, residual sums and casts between the products), the optimizers and the EMA
  (their ``aten`` ops, under ``Optimizer.step``), and everything else (embedding, losses, ACT
  bookkeeping, the weight casts);
- ``matmul_by_shape``: each product shape's calls, self milliseconds, share and GFLOP/s;
- ``by_op``: the 30 operators with the most self time.

The figures are shares of one process's time; on a machine with other work running they
shift (a contended core slows memory-bound passes and products differently), so the document
records the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance

import torch
from provenance import provenance

SHAPES = {
    # name: (shipped spec, seq_len, vocab, default batch)
    "sudoku": ("sudoku-extreme-mlp", 81, 11, 32),
    "maze": ("maze-hard-att", 900, 6, 4),
}
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm")
ATTENTION_OPS = (
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
)


def build(
    spec_name: str, batch: int, seq_len: int, vocab: int, bf16: bool, unit: str = "region"
) -> dict[str, Any]:
    """Model, optimizers, EMA, a synthetic batch and its carry. ``unit``: what is compiled,
    ``region`` (the recursion, as ``trm run`` compiles: :func:`trm.device.compile.
    compile_network` with the CPU backend) or ``net`` (the shared network alone)."""
    from trm.device.compile import compile_network
    from trm.device.contract import host_placement
    from trm.model import EMA, TinyRecursiveModel, build_optimizers
    from trm.plugins.backends import cpu
    from trm.spec import load_spec, resolve_spec_path

    spec = load_spec(resolve_spec_path(spec_name))
    torch.manual_seed(spec.train.seed)
    model = TinyRecursiveModel(
        spec.arch, seq_len=seq_len, vocab_size=vocab, num_puzzle_identifiers=2
    ).train()
    if unit == "net":
        model.net.compile()
    else:
        compile_network(model, cpu.CPU)
    generator = torch.Generator().manual_seed(spec.train.seed)
    batch_tensors = {
        "inputs": torch.randint(1, vocab, (batch, seq_len), generator=generator),
        "labels": torch.randint(1, vocab, (batch, seq_len), generator=generator),
        "puzzle_identifiers": torch.ones(batch, dtype=torch.long),
    }
    return {
        "spec": spec,
        "model": model,
        "optimizers": build_optimizers(model, spec.train),
        "ema": EMA(model, spec.train.ema_rate) if spec.train.ema else None,
        "batch": batch_tensors,
        "carry": model.initial_carry(batch_tensors),
        "placement": host_placement(torch.bfloat16 if bf16 else None),
    }


def train_step(run: dict[str, Any], update: int) -> None:
    """One optimizer step as :func:`trm.loop.step.attempt_step` takes it (no host read but the
    sums, no plugins)."""
    from trm.loop.step import accumulate_gradients
    from trm.model import lr_at_step

    model, batch, spec = run["model"], run["batch"], run["spec"]
    rows = batch["inputs"].shape[0]
    min_halt_steps = model.draw_min_halt_steps(rows, "cpu")
    for opt in run["optimizers"]:
        opt.zero_grad(set_to_none=True)
    pieces, sums = accumulate_gradients(
        model,
        run["carry"],
        batch,
        min_halt_steps=min_halt_steps,
        micro_batch_size=rows,
        loss=spec.arch.loss,
        divisor=rows,
        placement=run["placement"],
    )
    for piece_rows, new_carry in pieces:
        run["carry"].assign_rows(piece_rows, new_carry)
    for opt in run["optimizers"]:
        for group in opt.param_groups:
            group["lr"] = lr_at_step(update, spec.train, 1000, group["base_lr"])
        opt.step()
    if run["ema"] is not None:
        run["ema"].update(model)
    sums.tolist()


def attempt_steps(
    spec: Any, runtime: Any, data_dir: Path, batch: int, batches: int, total: int
) -> Any:
    """trm's training step (:func:`trm.loop.step.attempt_step`, no loop around it) on
    ``batches`` batches of ``batch`` rows gathered up front from ``data_dir``'s train split
    (reused in turn), on the model as the runtime builds it (the backend's MLP layout, its
    compile and precision), for a schedule of ``total`` steps; returns ``step()``, which takes
    the next step."""
    from trm.data.puzzle_dataset import open_split
    from trm.data.sampler import SplitIndex, TrainSampler
    from trm.data.shape import read_shape
    from trm.device.compile import compile_network
    from trm.loop.step import StepSetup, attempt_step
    from trm.model import EMA, build_model, build_optimizers
    from trm.state import TrainState

    train = spec.train
    torch.manual_seed(train.seed)
    index = SplitIndex(open_split(data_dir / spec.data.train_split))
    sampler = TrainSampler(index, batch, train.seed)
    gathered = [index.gather(sampler.examples_for_step(s)) for s in range(batches)]
    shape = read_shape(data_dir, spec.data.train_split)
    placement = runtime.placement()
    position_major = runtime.backend.position_major_mlp(runtime.compile)
    model = build_model(spec.arch, shape, position_major).to(placement.device).train()
    if runtime.compile:
        compile_network(model, runtime.backend, graphs=runtime.graphs)
    state = TrainState(
        spec=spec,
        model=model,
        optimizers=build_optimizers(model, train),
        ema=EMA(model, train.ema_rate) if train.ema else None,
        carry=model.initial_carry(placement.to_device(gathered[0])),
        run_dir=data_dir,
        total_steps=total,
        micro_batch_size=batch,
        backend=runtime.backend,
    )
    setup = StepSetup(placement, spec.arch.loss, batch)

    def step() -> None:
        attempt_step(state, gathered[state.step % len(gathered)], setup)
        state.step += 1

    return step


def alternate(
    runs: dict[str, dict[str, Any]], rounds: int, steps: int
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """3 untimed :func:`train_step` calls of each run (compilation happens there), then
    ``rounds`` rounds of a window of ``steps`` steps of each run in turn (A B A B): each run's
    warm-up seconds and its seconds a step in each window."""
    update = 1
    warmup_s: dict[str, float] = {}
    for name, run in runs.items():
        started = time.perf_counter()
        for _ in range(3):
            train_step(run, update)
            update += 1
        warmup_s[name] = round(time.perf_counter() - started, 2)
    windows: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            for _ in range(steps):
                train_step(run, update)
                update += 1
            windows[name].append((time.perf_counter() - started) / steps)
    return warmup_s, windows


def product_flops(op: str, shapes: list[list[int]]) -> int:
    """FLOPs of one call of a matrix product with these input shapes (0 if not one)."""
    if op == "aten::addmm":
        shapes = shapes[1:3]
    a, b = shapes[0], shapes[1]
    if op == "aten::bmm" and len(a) == 3:
        return 2 * a[0] * a[1] * a[2] * b[2]
    if len(a) == 2 and len(b) == 2:
        return 2 * a[0] * a[1] * b[1]
    return 0


def group_of(name: str) -> str:
    """The kind of time an operator's self time counts as."""
    if name in MATMUL_OPS or name in ATTENTION_OPS:
        return "matrix_products"
    if name.startswith("## Call CompiledFxGraph") or name.startswith("graph_"):
        return "compiled_elementwise"
    return "other"


def profile_shape(name: str, batch: int, steps: int, bf16: bool) -> dict[str, Any]:
    """Profile ``steps`` training steps at shape ``name``; see the module docstring."""
    from torch.profiler import ProfilerActivity, profile

    spec_name, seq_len, vocab, _ = SHAPES[name]
    run = build(spec_name, batch, seq_len, vocab, bf16)
    for update in (1, 2):  # compiles
        train_step(run, update)
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for update in range(3, 3 + steps):
            train_step(run, update)
    wall_s = (time.perf_counter() - started) / steps
    events = prof.key_averages()
    total_us = sum(e.self_cpu_time_total for e in events)
    groups = {"matrix_products": 0.0, "compiled_elementwise": 0.0, "optimizer_and_ema": 0.0}
    groups["other"] = 0.0
    optimizer_us = sum(e.cpu_time_total for e in events if e.key.startswith("Optimizer.step#"))
    for e in events:
        groups[group_of(e.key)] += e.self_cpu_time_total
    groups["optimizer_and_ema"] = optimizer_us
    groups["other"] -= optimizer_us  # the optimizers' aten ops were counted as "other"
    by_shape = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key not in MATMUL_OPS or not e.input_shapes:
            continue
        flops = product_flops(e.key, e.input_shapes) * e.count
        seconds = e.self_cpu_time_total / 1e6
        by_shape.append(
            {
                "op": e.key,
                "shapes": e.input_shapes[1:3] if e.key == "aten::addmm" else e.input_shapes[:2],
                "calls": e.count,
                "self_ms": round(e.self_cpu_time_total / 1e3, 2),
                "share": round(e.self_cpu_time_total / total_us, 4),
                "gflops_per_s": round(flops / seconds / 1e9, 1) if seconds > 0 else None,
            }
        )
    by_shape.sort(key=lambda r: -r["self_ms"])
    by_op = sorted(events, key=lambda e: -e.self_cpu_time_total)[:30]
    return {
        "spec": spec_name,
        "seq_len": seq_len,
        "batch": batch,
        "precision": "bf16" if bf16 else "fp32",
        "profiled_steps": steps,
        "step_s_under_profiler": round(wall_s, 3),
        "samples_per_s_under_profiler": round(batch / wall_s, 3),
        "self_ms_per_step": round(total_us / 1e3 / steps, 1),
        "groups": {k: round(v / total_us, 4) for k, v in groups.items()},
        "matmul_by_shape": by_shape,
        "by_op": [
            {
                "op": e.key[:80],
                "calls": e.count,
                "self_ms": round(e.self_cpu_time_total / 1e3, 2),
                "share": round(e.self_cpu_time_total / total_us, 4),
            }
            for e in by_op
        ],
    }


def machine() -> dict[str, Any]:
    """The CPU model and core counts as ``lscpu`` gives them, and whether it has native bf16."""
    info: dict[str, Any] = {"platform": platform.platform()}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        text = ""
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines())
    )
    info["model_name"] = fields.get("Model name")
    info["cpu_family"] = fields.get("CPU family")
    info["cores"] = fields.get("CPU(s)")
    flags = fields.get("Flags", "").split()
    info["bf16_flags"] = [f for f in flags if f in ("avx512_bf16", "amx_bf16", "amx_tile")]
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="sudoku,maze", help="shapes, comma-separated")
    parser.add_argument("--batch", type=int, default=0, help="rows a step (0: the shape's)")
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--steps", type=int, default=1, help="profiled steps per shape")
    parser.add_argument("--json", action="store_true", help="print the document")
    parser.add_argument("--out", type=Path, help="write the document here")
    args = parser.parse_args(argv)
    shapes = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or args.steps < 1 or args.batch < 0 or args.threads < 0:
        print(
            f"trm: error: --only takes {', '.join(SHAPES)}; --steps >= 1, --batch and "
            "--threads >= 0",
            file=sys.stderr,
        )
        return 2
    from trm.device.host_memory import reuse_freed_memory

    if args.threads:
        torch.set_num_threads(args.threads)
    reuse_freed_memory()
    info = machine()
    bf16 = bool(info["bf16_flags"])  # bf16 autocast where the CPU multiplies bf16 natively
    document: dict[str, Any] = {
        "provenance": provenance(),
        "machine": info,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_before": os.getloadavg(),
        "shapes": {},
    }
    for name in shapes:
        batch = args.batch or SHAPES[name][3]
        document["shapes"][name] = profile_shape(name, batch, args.steps, bf16)
        groups = document["shapes"][name]["groups"]
        print(
            f"{name}: batch {batch}: "
            + ", ".join(f"{k} {v * 100:.1f}%" for k, v in groups.items()),
            file=sys.stderr,
        )
    document["load_after"] = os.getloadavg()
    text = json.dumps(document, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
