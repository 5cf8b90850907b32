"""Compare the loss curves of two runs of the same spec (another backend, threads, machine).

    python benchmarks/loss_curves.py RUN_A RUN_B [--window STEPS] [--json]

Reads each run's metrics.jsonl (the training rows: ``step`` and ``loss``) and prints, per
window of ``--window`` steps (default 100), both runs' mean loss, the difference of the means
and the largest per-step difference; then the whole run's largest per-step difference and each
run's best and final held-out exact accuracy (summary.json). Two backends draw their halting
exploration from different generators, so their curves are not step-for-step equal: the window
means are the figure to compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import provenance
from tables import print_rows


def losses(run: Path) -> dict[int, float]:
    """Step -> training loss, from the rows of ``run/metrics.jsonl`` that have both."""
    out: dict[int, float] = {}
    with (run / "metrics.jsonl").open() as rows:
        for line in rows:
            row = json.loads(line)
            if isinstance(row.get("step"), int) and isinstance(row.get("loss"), float):
                out[row["step"]] = row["loss"]
    return out


def summary(run: Path) -> dict[str, Any]:
    path = run / "summary.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    keys = ("backend", "steps", "wall_s", "best_exact_accuracy", "final_exact_accuracy")
    return {k: data.get(k) for k in keys}


def compare(a: dict[int, float], b: dict[int, float], window: int) -> dict[str, Any]:
    steps = sorted(set(a) & set(b))
    if not steps:
        raise SystemExit("loss_curves: the runs share no step with a loss")
    rows = []
    for start in range(0, steps[-1], window):
        inside = [s for s in steps if start < s <= start + window]
        if not inside:
            continue
        mean_a = statistics.fmean(a[s] for s in inside)
        mean_b = statistics.fmean(b[s] for s in inside)
        rows.append(
            {
                "steps": f"{start + 1}-{start + window}",
                "mean_a": mean_a,
                "mean_b": mean_b,
                "mean_difference": abs(mean_a - mean_b),
                "largest_step_difference": max(abs(a[s] - b[s]) for s in inside),
            }
        )
    return {
        "shared_steps": len(steps),
        "window": window,
        "windows": rows,
        "largest_step_difference": max(abs(a[s] - b[s]) for s in steps),
        "largest_window_difference": max(r["mean_difference"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--window", type=int, default=100, help="steps per window (100)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    result = compare(losses(args.run_a), losses(args.run_b), max(1, args.window))
    result["a"] = {"run": str(args.run_a), **summary(args.run_a)}
    result["b"] = {"run": str(args.run_b), **summary(args.run_b)}
    result["provenance"] = provenance()
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print_rows(
        ["steps", "mean loss A", "mean loss B", "|difference|", "largest step |diff|"],
        [
            [
                r["steps"],
                f"{r['mean_a']:.4f}",
                f"{r['mean_b']:.4f}",
                f"{r['mean_difference']:.4f}",
                f"{r['largest_step_difference']:.4f}",
            ]
            for r in result["windows"]
        ],
    )
    for side in ("a", "b"):
        s = result[side]
        print(
            f"{side.upper()}: {s['run']} ({s['backend']}): best exact {s['best_exact_accuracy']}, "
            f"final {s['final_exact_accuracy']}, {s['steps']} steps in {s['wall_s']} s"
        )


if __name__ == "__main__":
    main()
