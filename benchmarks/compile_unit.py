"""What to compile, timed: the whole recursion of a supervision step as one graph (the region
``trm run`` compiles, :mod:`trm.model.region`) against the shared network ``net`` compiled
alone (each of its calls its own compiled call, the cycles looping in eager Python).

Usage: python benchmarks/compile_unit.py [--spec quickstart] [--batches 32,128]
[--threads 2] [--rounds 6] [--steps 8] [--out FILE]

For each batch, both are built in one process (same spec, seed, weights and data, the MLP
layout the CPU backend chooses for a compiled network) and their training steps
(``benchmarks/step_profile.py``'s ``train_step``: forward, loss, backward, optimizers, EMA)
alternate in windows of ``steps`` steps, A B A B, ``rounds`` times, after 3 untimed steps each
(compilation happens there; their seconds are recorded as ``warmup_s``, with Inductor's
on-disk cache as this machine has it). Reports the median seconds a step of each and the
region's speed-up. The load (``uptime``) is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance, step_profile

import step_profile
import torch
from provenance import load, provenance

from trm.model import TinyRecursiveModel
from trm.plugins.backends import cpu
from trm.spec import load_spec, resolve_spec_path

UNITS = ("region", "net")
SHAPES = {"quickstart": (16, 6), "sudoku9-laptop": (81, 11), "sudoku-extreme-mlp": (81, 11)}


def build(spec: str, batch: int, unit: str) -> dict[str, Any]:
    """step_profile's run (model, optimizers, EMA, batch, carry) with ``unit`` compiled, in
    the layout the CPU backend gives a compiled MLP network."""
    built = TinyRecursiveModel.__init__
    position_major = cpu.CPU.position_major_mlp(True)

    def init(self, arch, *args, **kwargs) -> None:
        kwargs["position_major"] = position_major if arch.mlp_t else None
        built(self, arch, *args, **kwargs)

    TinyRecursiveModel.__init__ = init  # type: ignore[method-assign]
    try:
        seq_len, vocab = SHAPES[spec]
        return step_profile.build(spec, batch, seq_len, vocab, bf16=False, unit=unit)
    finally:
        TinyRecursiveModel.__init__ = built  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="quickstart", choices=tuple(SHAPES))
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    load_spec(resolve_spec_path(args.spec))  # a TrmError for an unknown spec, before building
    torch.set_num_threads(args.threads)
    document: dict[str, Any] = {
        "kind": "trm-compile-unit",
        "provenance": provenance(),
        "spec": args.spec,
        "precision": "fp32",
        "position_major": cpu.CPU.position_major_mlp(True),
        "threads": args.threads,
        "rounds": args.rounds,
        "steps_per_window": args.steps,
        "load_before": load(),
        "batches": [],
    }
    for batch in [int(b) for b in args.batches.split(",") if b]:
        runs = {unit: build(args.spec, batch, unit) for unit in UNITS}
        warmup_s, windows = step_profile.alternate(runs, args.rounds, args.steps)
        medians = {unit: statistics.median(w) for unit, w in windows.items()}
        row = {
            "batch": batch,
            "warmup_s": warmup_s,
            "step_s_windows": windows,
            "step_s_median": medians,
            "region_speedup_over_net": medians["net"] / medians["region"],
        }
        document["batches"].append(row)
        print(json.dumps({"batch": batch, "step_s_median": medians}), file=sys.stderr)
    document["load_after"] = load()
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
