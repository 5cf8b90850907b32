"""What each Speed is Confidence lever costs per training step and in memory, beside the
spec as written: Muon (``train.optimizer=muon``), the normed SwiGLU (``arch.swiglu_norm``),
winner-take-all latents (``train.latent_candidates=4``) and their combinations.

Usage: python benchmarks/lever_cost.py [--spec quickstart] [--rounds 3] [--steps 5]
[--warmup 3] [--batch 128] [--set KEY=VALUE ...] [--json] [--out FILE] [--from-json FILE]

Per step: ``trm bench SPEC --no-plain --json`` with the lever's ``--set`` values (and the
shared ``--set`` values, e.g. ``runtime.threads=1``, ``runtime.compile=on``), one process a
window, the levers alternated (A B C … A B C …) ``--rounds`` times so that all see the same
machine load; the figure is the median over rounds of each window's median step. In memory:
``trm estimate SPEC --mode as-written --json`` with the same values: the whole step's host
total, and the items the levers change (optimizer states, activations, the carry).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance, tables

from provenance import load, provenance
from tables import print_rows, print_saved

LEVERS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "muon": ("train.optimizer=muon",),
    "swiglu_norm": ("arch.swiglu_norm=true",),
    "muon_swiglu": ("train.optimizer=muon", "arch.swiglu_norm=true"),
    "wta4": ("train.latent_candidates=4",),
    "all": ("train.optimizer=muon", "arch.swiglu_norm=true", "train.latent_candidates=4"),
}
ITEMS = ("optimizer states", "activations", "carry (z_H, z_L)")
MIB = 2**20


def trm_json(words: list[str]) -> dict[str, Any]:
    """The JSON document a ``python -m trm …`` command prints; RuntimeError with its last
    lines when it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "trm", *words], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"trm {' '.join(words)}: exit {done.returncode}: {tail}")
    return json.loads(done.stdout)


def sets_words(sets: tuple[str, ...]) -> list[str]:
    return [word for item in sets for word in ("--set", item)]


def bench_step_s(spec: str, sets: tuple[str, ...], args: argparse.Namespace) -> float:
    """The median seconds of a training step in one ``trm bench`` process."""
    words = ["bench", spec, "--no-plain", "--json", "--steps", str(args.steps)]
    words += ["--warmup", str(args.warmup), "--batch", str(args.batch), *sets_words(sets)]
    document = trm_json(words)
    runs = document.get("runs", [document])
    return statistics.median(runs[0]["step_s"])


def estimate(spec: str, sets: tuple[str, ...]) -> dict[str, Any]:
    """The host total and the levers' items of ``trm estimate``, in MiB."""
    document = trm_json(["estimate", spec, "--mode", "as-written", "--json", *sets_words(sets)])
    items = {item["name"]: item["bytes"] / MIB for item in document["items"]}
    return {
        "total_mib": document["host_total_bytes"] / MIB,
        **{name: round(items.get(name, 0.0), 3) for name in ITEMS},
    }


HEADERS = (
    "lever",
    "sets",
    "s/step (median)",
    "× baseline",
    "estimate MiB",
    *(f"{item} MiB" for item in ITEMS),
)


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    base = document["levers"]["baseline"]["step_s"]
    rows = []
    for name, lever in document["levers"].items():
        memory = lever["memory"]
        rows.append(
            [
                name,
                ", ".join(lever["sets"]) or "-",
                f"{lever['step_s']:.3f}",
                f"{lever['step_s'] / base:.2f}",
                f"{memory['total_mib']:.1f}",
                *(f"{memory[item]:.2f}" for item in ITEMS),
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="quickstart")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--out", type=Path, help="write the JSON document there")
    parser.add_argument("--from-json", type=Path, help="print the table of a saved document")
    parser.add_argument("--markdown", action="store_true", help="the table as markdown")
    args = parser.parse_args(argv)
    if args.from_json:
        return print_saved(args.from_json, HEADERS, table_rows, args.markdown)
    if min(args.rounds, args.steps, args.batch) < 1 or args.warmup < 0:
        print("trm: error: --rounds, --steps and --batch must be positive", file=sys.stderr)
        return 2
    shared = tuple(args.set)
    document: dict[str, Any] = {
        "kind": "trm-lever-cost",
        "provenance": provenance(),
        "spec": args.spec,
        "batch": args.batch,
        "steps_per_window": args.steps,
        "warmup_steps": args.warmup,
        "rounds": args.rounds,
        "shared_sets": list(shared),
        "load_before": load(),
        "levers": {},
    }
    windows: dict[str, list[float]] = {name: [] for name in LEVERS}
    try:
        for _ in range(args.rounds):
            for name, sets in LEVERS.items():
                windows[name].append(bench_step_s(args.spec, (*shared, *sets), args))
                print(f"{name}: {windows[name][-1]:.3f} s/step", file=sys.stderr)
        for name, sets in LEVERS.items():
            document["levers"][name] = {
                "sets": list(sets),
                "step_s_windows": windows[name],
                "step_s": statistics.median(windows[name]),
                "memory": estimate(args.spec, (*shared, *sets)),
            }
    except RuntimeError as exc:
        print(f"trm: error: {exc}", file=sys.stderr)
        return 2
    document["load_after"] = load()
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    if args.json:
        print(text)
    else:
        print_rows(HEADERS, table_rows(document), markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
