"""Multi-task mixing: one model on 6x6 Sudoku + maze-small against each task alone, at equal
total steps.

Usage:
  python benchmarks/mix_ablation.py [--steps 800] [--out DIR] [--arms sudoku6,maze,mix]
      [--json FILE]
  python benchmarks/mix_ablation.py --merge A.json B.json --json FILE

``--merge`` joins documents of the same ``--steps`` whose arms were run in separate
invocations (one after the other) into one, each part's provenance kept under ``parts``.

The mix is specs/mix-sudoku6-maze-small.toml (two ``[[data.mix]]`` tables, weight 1 each).
Each task alone is that spec with ``[data]`` set to the task's own table (same model, batch,
schedule, seed). Every arm trains ``--steps`` optimizer steps of the same global batch — so the
mixed model sees each task in about half of its rows, and each model costs the same compute —
then evaluates once, on all held-out puzzles of each task (500 each), with the EMA weights.
Each arm is a fresh ``python -m trm run`` process (under ``nice -n 10``). The document holds
each arm's held-out exact and cell accuracy per task, its training wall time and the load
average before and after it, with the provenance block.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tomli_w
import tomllib
from provenance import load, provenance

REPO = Path(__file__).resolve().parent.parent
MIX_SPEC = REPO / "specs" / "mix-sudoku6-maze-small.toml"


def arm_specs() -> dict[str, dict[str, Any]]:
    """The mix spec and, per task, the same spec training that task alone."""
    mixed = tomllib.loads(MIX_SPEC.read_text(encoding="utf-8"))
    arms = {}
    for entry in mixed["data"]["mix"]:
        alone = dict(mixed)
        alone["name"] = entry["name"]
        alone["data"] = {"source": entry["source"], "generate": entry["generate"]}
        arms[entry["name"]] = alone
    arms["mix"] = mixed
    return arms


def last_eval(run_dir: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row.get("kind") == "eval"][-1]


def run_arm(name: str, spec: dict[str, Any], steps: int, out: Path) -> dict[str, Any]:
    spec_file = out / "specs" / f"{name}.toml"
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(tomli_w.dumps(spec), encoding="utf-8")
    run_dir = out / "runs" / name
    command = [
        "nice", "-n", "10", sys.executable, "-m", "trm", "run", str(spec_file),
        "--out", str(run_dir), "--resume", "never",
        "--set", f"train.max_steps={steps}", "--set", f"train.eval_interval={steps}",
    ]  # fmt: skip
    before = load()
    started = time.perf_counter()
    subprocess.run(command, check=True)
    elapsed_s = time.perf_counter() - started
    summary = json.loads((run_dir / "summary.json").read_text())
    row = last_eval(run_dir)
    tasks = [e["name"] for e in spec["data"]["mix"]] if "mix" in spec["data"] else [name]
    per_task = {}
    for task in tasks:
        suffix = f"/{task}" if name == "mix" else ""
        per_task[task] = {
            "examples": row[f"examples{suffix}"],
            "exact_accuracy": round(row[f"exact_accuracy{suffix}"], 4),
            "cell_accuracy": round(row[f"cell_accuracy{suffix}"], 4),
        }
    return {
        "steps": summary["steps"],
        "train_wall_s": summary["wall_s"],
        "process_wall_s": round(elapsed_s, 1),
        "held_out": per_task,
        "load_before": before,
        "load_after": load(),
    }


def merge(files: list[Path], out: Path | None) -> None:
    """One document of the arms of ``files`` (all of one step count)."""
    parts = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    if len({p["steps_each"] for p in parts}) != 1:
        raise SystemExit("--merge: the documents were run at different --steps")
    document = {k: v for k, v in parts[0].items() if k not in ("provenance", "arms")}
    document["provenance"] = provenance()
    document["parts"] = [{"provenance": p["provenance"], "arms": list(p["arms"])} for p in parts]
    document["arms"] = {name: arm for p in parts for name, arm in p["arms"].items()}
    text = json.dumps(document, indent=2) + "\n"
    if out is not None:
        out.write_text(text, encoding="utf-8")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--arms", default="sudoku6,maze,mix")
    parser.add_argument("--json", type=Path, default=None, help="write the document here")
    parser.add_argument("--merge", type=Path, nargs="+", default=None)
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.json)
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="trm-mix-ablation-"))
    specs = arm_specs()
    document: dict[str, Any] = {
        "provenance": provenance(),
        "spec": str(MIX_SPEC.relative_to(REPO)),
        "steps_each": args.steps,
        "comparison": "equal total steps: each arm trains --steps steps of the same global "
        "batch (the mix sees each task in about half its rows)",
        "arms": {},
    }
    for name in args.arms.split(","):
        document["arms"][name] = run_arm(name, specs[name], args.steps, out)
        print(json.dumps({name: document["arms"][name]["held_out"]}), flush=True)
    text = json.dumps(document, indent=2) + "\n"
    if args.json is not None:
        args.json.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
