"""Does a wall-time budget hold? `trm run` with train.time_budget_s, against what it then took.

Usage: python benchmarks/budget_plan.py [--spec sudoku9-laptop] [--budget-s 1800]
[--set KEY=VALUE ...] [--run-dir DIR] [--json]. Runs `trm run SPEC --set
train.time_budget_s=BUDGET` (plus the `--set` values) into a temporary directory as a fresh
process — or, with ``--run-dir``, takes a budgeted run that already finished, keeping its
model — then reads its budget.json (the steps planned, each depth's measured step time) and its
metrics.jsonl and summary.json (what the run did) and compares, per depth, the planned step
time with the median step time of the run's rows at that depth (global batch / samples_per_s),
and the planned training seconds with the run's wall seconds (which include evaluations and
checkpoints). Prints a table, or one JSON document. Run it on an idle machine: the plan is only
as steady as the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tables import print_rows


def run_with_budget(spec: str, budget_s: float, sets: list[str], work: Path) -> Path:
    run_dir = work / "run"
    words = ["run", spec, "--set", f"train.time_budget_s={budget_s:g}", "--out", str(run_dir)]
    for text in sets:
        words += ["--set", text]
    done = subprocess.run(
        [sys.executable, "-m", "trm", *words], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"trm {' '.join(words)} failed with exit code {done.returncode}")
    return run_dir


def compare(run_dir: Path) -> dict:
    plan = json.loads((run_dir / "budget.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "kind" not in r and r.get("samples_per_s")]
    batch = train[-1]["samples"] // train[-1]["step"] if train else 0
    stages = []
    for stage in plan["stages"]:
        depth = (stage["H_cycles"], stage["L_cycles"])
        at_depth = [r for r in train if (r.get("H_cycles"), r.get("L_cycles")) == depth]
        measured = statistics.median(batch / r["samples_per_s"] for r in at_depth[1:] or at_depth)
        stages.append(
            {
                "H_cycles": depth[0],
                "L_cycles": depth[1],
                "fraction": stage["fraction"],
                "planned_step_s": round(stage["step_s"], 4),
                "run_step_s": round(measured, 4),
                "run_over_planned": round(measured / stage["step_s"], 3),
            }
        )
    return {
        "budget_s": plan["budget_s"],
        "steps": plan["steps"],
        "planned_s": plan["planned_s"],
        "run_steps": summary["steps"],
        "run_wall_s": summary["wall_s"],
        "wall_over_budget": round(summary["wall_s"] / plan["budget_s"], 3),
        "stages": stages,
    }


def machine_name() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="sudoku9-laptop")
    parser.add_argument("--budget-s", type=float, default=1800.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--run-dir", type=Path, help="judge this finished budgeted run instead of running one"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.run_dir is not None:
        result = compare(args.run_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="trm-budget-check-") as tmp:
            result = compare(run_with_budget(args.spec, args.budget_s, args.set, Path(tmp)))
    result |= {"spec": args.spec, "sets": args.set, "machine": machine_name()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{args.spec}: {result['steps']} steps planned for {result['budget_s']:g} s "
        f"(predicted {result['planned_s']:g} s of steps); the run took {result['run_wall_s']:g} s "
        f"in all ({result['wall_over_budget']:.2f} × the budget)"
    )
    print_rows(
        ["depth", "share", "planned s/step", "run s/step", "run / planned"],
        [
            [
                f"({s['H_cycles']}, {s['L_cycles']})",
                f"{s['fraction']:.0%}",
                f"{s['planned_step_s']:.3f}",
                f"{s['run_step_s']:.3f}",
                f"{s['run_over_planned']:.2f}",
            ]
            for s in result["stages"]
        ],
    )


if __name__ == "__main__":
    main()
