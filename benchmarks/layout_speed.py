"""The MLP variant's two layouts timed against each other: trm's position-major network
([P, B, D], both mixings plain products) and the reference's token-major one (transposes
around the position mixing), the same function (tests/test_model.py checks it).

Usage: python benchmarks/layout_speed.py [--spec quickstart] [--batches 32,128]
[--compile off|on] [--threads 2] [--rounds 6] [--steps 8] [--out FILE]

For each batch, both layouts are built in one process (same spec, seed, weights and data) and
their training steps (``attempt_step``-equivalent: forward, loss, backward, optimizers, EMA;
``benchmarks/step_profile.py``'s ``train_step``) alternate in windows of ``steps`` steps,
A B A B, ``rounds`` times, after 3 untimed steps each. Reports the median seconds a step of
each layout and their ratio. The load (``uptime``) is recorded before and after.
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

LAYOUTS = {"position-major": True, "token-major": False}


def build(spec: str, batch: int, position_major: bool, compiled: bool) -> dict[str, Any]:
    """step_profile's run (model, optimizers, EMA, batch, carry) in one layout, eager unless
    ``compiled``."""
    built = TinyRecursiveModel.__init__
    compile_ = torch.nn.Module.compile

    def init(self, *args, **kwargs) -> None:
        kwargs["position_major"] = position_major
        built(self, *args, **kwargs)

    TinyRecursiveModel.__init__ = init  # type: ignore[method-assign]
    if not compiled:
        torch.nn.Module.compile = lambda self, *a, **k: None  # type: ignore[method-assign]
    try:
        from trm.spec import load_spec, resolve_spec_path

        seq_len = 16 if spec == "quickstart" else 81
        vocab = 6 if spec == "quickstart" else 11
        load_spec(resolve_spec_path(spec))  # a TrmError for an unknown spec, before building
        return step_profile.build(spec, batch, seq_len, vocab, bf16=False)
    finally:
        TinyRecursiveModel.__init__ = built  # type: ignore[method-assign]
        torch.nn.Module.compile = compile_  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="quickstart", choices=("quickstart", "sudoku9-laptop"))
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--compile", choices=("off", "on"), default="off")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    document: dict[str, Any] = {
        "kind": "trm-layout-speed",
        "provenance": provenance(),
        "spec": args.spec,
        "precision": "fp32",
        "compiled": args.compile == "on",
        "threads": args.threads,
        "rounds": args.rounds,
        "steps_per_window": args.steps,
        "load_before": load(),
        "batches": [],
    }
    for batch in [int(b) for b in args.batches.split(",") if b]:
        runs = {
            name: build(args.spec, batch, pm, args.compile == "on") for name, pm in LAYOUTS.items()
        }
        _, windows = step_profile.alternate(runs, args.rounds, args.steps)
        medians = {name: statistics.median(w) for name, w in windows.items()}
        row = {
            "batch": batch,
            "step_s_windows": windows,
            "step_s_median": medians,
            "token_major_over_position_major_speed": medians["position-major"]
            / medians["token-major"],
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
