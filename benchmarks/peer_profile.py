"""Where trm's training step and the official code's spend their time, side by side: both
profiled by operator at one shape, and the share of each step that is the matrix products
both make alike.

Usage: python benchmarks/peer_profile.py --reference PATH [--spec quickstart] [--batch 32]
[--threads N] [--steps 10] [--windows 2] [--official official-fp32|official] [--out FILE]
[--from-json FILE] [--markdown]

trm's step is :func:`trm.loop.step.attempt_step` on trm's model as a run builds it here (the
layout the backend chooses, compiled as ``runtime.compile = "on"`` compiles: the recursion
region); the official step is ``benchmarks/peer_steps.py``'s (its model and ACT loss head,
``torch.compile``'d as it ships, its optimizers and EMA; ``official-fp32`` with its own
``arch.forward_dtype = float32``). Both train the same batches. After 4 untimed steps each
(compilation), ``windows`` windows of ``steps`` steps of each run under ``torch.profiler``
(CPU, with shapes), alternated trm, official, trm, official.

For each side the document holds the self milliseconds a step and their groups (matrix
products, the compiled graphs' fused kernels, the optimizers and EMA, the rest;
``benchmarks/step_profile.py``'s grouping), and each product shape's calls and milliseconds a
step. A product shape is *shared* when both sides make it (``mm`` or ``addmm``, the same
[M, K] x [K, N]) the same number of times a step; ``shared_products_share`` is the share of a
side's step spent in shared products. Where the two steps are the same products and the same
number of compiled graphs, a ratio of step times away from 1 is not in what either code
computes. The load (``uptime``) is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # peer_steps, step_profile, ...

import torch
from peer_steps import Batches, official_step
from provenance import load, provenance
from step_profile import MATMUL_OPS, attempt_steps, group_of, machine
from tables import print_rows, print_saved

from trm.data.shape import read_shape
from trm.measure.loop_timing import BENCH_OFF, bench_spec, small_data_spec
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import choose_runtime, detect_hardware
from trm.plugin_manager import load_plugins
from trm.spec import apply_overrides, load_spec, resolve_spec_path

HEADERS = (
    "side",
    "self ms/step",
    "products",
    "shared products",
    "compiled graphs",
    "graph calls/step",
    "optimizers+EMA",
    "other",
)


def profile_windows(step, steps: int) -> list[Any]:
    """``steps`` calls of ``step`` under the profiler; the profiler's events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    return list(prof.key_averages(group_by_input_shape=True))


def product_key(op: str, shapes: list[list[int]]) -> str | None:
    """``M x K x N`` of a 2-D product (``mm`` or ``addmm``), None for anything else."""
    if op == "aten::addmm":
        shapes = shapes[1:3]
    if len(shapes) < 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2:
        return None
    (m, k), (_, n) = shapes[0], shapes[1]
    return f"{m}x{k}x{n}"


def summarise(events: list[Any], steps: int) -> dict[str, Any]:
    """Self time a step, by group and by product shape."""
    per_step = 1e3 * steps
    total_us = sum(e.self_cpu_time_total for e in events)
    groups: dict[str, float] = defaultdict(float)
    products: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0.0, "ms": 0.0})
    graph_calls = 0
    optimizer_us = 0.0
    for e in events:
        groups[group_of(e.key)] += e.self_cpu_time_total
        if e.key.startswith("Optimizer.step#"):
            optimizer_us += e.cpu_time_total
        if e.key.startswith("## Call CompiledFxGraph"):
            graph_calls += e.count
        if e.key in MATMUL_OPS and e.input_shapes:
            key = product_key(e.key, e.input_shapes)
            if key is not None:
                products[key]["calls"] += e.count / steps
                products[key]["ms"] += e.self_cpu_time_total / per_step
    groups["optimizer_and_ema"] = optimizer_us
    groups["other"] -= optimizer_us  # the optimizers' aten ops were counted as "other"
    return {
        "self_ms_per_step": total_us / per_step,
        "group_ms_per_step": {k: v / per_step for k, v in groups.items()},
        "graph_calls_per_step": graph_calls / steps,
        "products": dict(products),
    }


def compare(trm: dict[str, Any], peer: dict[str, Any]) -> None:
    """Mark each side's shared products (see the module docstring) and their share."""
    shared = [
        key
        for key, row in trm["products"].items()
        if key in peer["products"] and round(peer["products"][key]["calls"]) == round(row["calls"])
    ]
    for side in (trm, peer):
        side["shared_product_shapes"] = sorted(shared)
        shared_ms = sum(side["products"][key]["ms"] for key in shared)
        side["shared_products_share"] = shared_ms / side["self_ms_per_step"]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    spec = load_spec(resolve_spec_path(args.spec))
    spec = apply_overrides(spec, ["runtime.compile=on", f"runtime.threads={args.threads}"])
    torch.set_num_threads(args.threads)
    pm = load_plugins(list(BENCH_OFF))
    runtime = choose_runtime(pm, spec, detect_hardware(pm))
    total = 4 + args.windows * args.steps
    spec = bench_spec(spec, args.batch, total)
    document: dict[str, Any] = {
        "kind": "trm-peer-profile",
        "provenance": provenance(),
        "machine": machine(),
        "torch": torch.__version__,
        "spec": args.spec,
        "batch": args.batch,
        "threads": args.threads,
        "precision": runtime.precision,
        "official": args.official,
        "steps_per_window": args.steps,
        "windows": args.windows,
        "load_before": load(),
    }
    with tempfile.TemporaryDirectory(prefix="trm-peer-profile-") as folder:
        data_dir = ensure_dataset(pm, small_data_spec(spec, pm, max(args.batch, 8)), Path(folder),
                                  lambda line: print(line, file=sys.stderr))  # fmt: skip
        shape = read_shape(data_dir, spec.data.train_split)
        dtype = "float32" if args.official == "official-fp32" else None
        batches = Batches(spec, data_dir, args.batch, runtime.device)
        peer = official_step(
            args.reference, spec, shape, batches, runtime.device, total, forward_dtype=dtype
        )
        sides = {
            "trm": attempt_steps(spec, runtime, data_dir, args.batch, 8, total),
            args.official: peer.step,
        }
        for step in sides.values():
            for _ in range(4):  # compiles
                step()
        events: dict[str, list[Any]] = {name: [] for name in sides}
        for _ in range(args.windows):
            for name, step in sides.items():
                events[name] += profile_windows(step, args.steps)
    steps = args.windows * args.steps
    summaries = {name: summarise(e, steps) for name, e in events.items()}
    compare(summaries["trm"], summaries[args.official])
    document["sides"] = summaries
    document["load_after"] = load()
    return document


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, side in document["sides"].items():
        total = side["self_ms_per_step"]
        groups = side["group_ms_per_step"]

        def share(value: float, total: float = total) -> str:
            return f"{value / total:.1%}"

        rows.append(
            [
                name,
                f"{total:.1f}",
                share(groups.get("matrix_products", 0.0)),
                f"{side['shared_products_share']:.1%}",
                share(groups.get("compiled_elementwise", 0.0)),
                f"{side['graph_calls_per_step']:.0f}",
                share(groups.get("optimizer_and_ema", 0.0)),
                share(groups.get("other", 0.0)),
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path)
    parser.add_argument("--spec", default="quickstart")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument(
        "--official", choices=("official-fp32", "official"), default="official-fp32"
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--from-json", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return print_saved(args.from_json, HEADERS, table_rows, markdown=args.markdown)
    if args.reference is None or not (args.reference / "models").is_dir():
        print("trm: error: --reference must name a TinyRecursiveModels checkout", file=sys.stderr)
        return 2
    if min(args.batch, args.threads, args.steps, args.windows) < 1:
        print("trm: error: --batch, --threads, --steps and --windows must be >= 1", file=sys.stderr)
        return 2
    document = measure(args)
    if args.out:
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    print_rows(HEADERS, table_rows(document), markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
