"""Score runs of the sudoku9-laptop recipe on fresh puzzles of both kinds and keep a table.

Usage: python benchmarks/recipe_runs.py --fresh30 DIR --fresh-minimal DIR
    --run NAME=RUN_DIR::COMMAND [--run ...] [--into FILE] [--what TEXT]

Each run's chosen checkpoint (its best, else its newest: shipped_weights.chosen_checkpoint, as
the shipped model's manifest is scored) is scored with one attempt by `trm eval CKPT --data DIR
--json` on the two fresh sets, which are the shipped manifest's kinds (weights/sudoku9-laptop.json,
seed 1): 1,000 puzzles with 30 clues (`trm data build sudoku --size 9 --count 1 --test-count
1000 --clues 30 --augment 0 --seed 1`) and 500 minimal puzzles (the same with --test-count 500
--minimal 1.0). Steps and wall seconds come from the run's summary.json. Rows are added to
FILE (a results document with provenance(); created when missing), replacing rows of the
same name.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from provenance import provenance
from shipped_weights import chosen_checkpoint


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def score(checkpoint: Path, data: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "trm", "eval", str(checkpoint), "--data", data, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    return {k: doc[k] for k in ("examples", "exact_accuracy", "cell_accuracy", "step")}


def row_of(name: str, run_dir: Path, command: str, a: argparse.Namespace) -> dict[str, Any]:
    checkpoint = chosen_checkpoint(run_dir)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    fresh30 = score(checkpoint, a.fresh30)
    minimal = score(checkpoint, a.fresh_minimal)
    return {
        "name": name,
        "command": command,
        "run_dir": str(run_dir),
        "checkpoint": checkpoint.name,
        "checkpoint_step": fresh30["step"],
        "steps": summary.get("steps", summary.get("step")),
        "wall_s": summary.get("wall_s", summary.get("train_s")),
        "fresh_30_clues": {k: fresh30[k] for k in ("examples", "exact_accuracy", "cell_accuracy")},
        "fresh_minimal": {k: minimal[k] for k in ("examples", "exact_accuracy", "cell_accuracy")},
        "load_at_scoring": uptime(),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--fresh30", required=True)
    p.add_argument("--fresh-minimal", required=True)
    p.add_argument("--run", action="append", required=True, help="NAME=RUN_DIR::COMMAND")
    p.add_argument("--into", required=True)
    p.add_argument("--what", default="")
    a = p.parse_args()
    path = Path(a.into)
    doc = json.loads(path.read_text()) if path.exists() else {"rows": []}
    for item in a.run:
        name, rest = item.split("=", 1)
        run_dir, command = rest.split("::", 1)
        row = row_of(name, Path(run_dir), command, a)
        print(json.dumps(row), file=sys.stderr, flush=True)
        doc["rows"] = [r for r in doc["rows"] if r["name"] != name] + [row]
    if a.what:
        doc["what"] = a.what
    doc["fresh_sets"] = {
        "30 clues": "trm data build sudoku --size 9 --count 1 --test-count 1000 --clues 30 "
        "--augment 0 --seed 1",
        "minimal": "trm data build sudoku --size 9 --count 1 --test-count 500 --clues 30 "
        "--minimal 1.0 --augment 0 --seed 1",
    }
    doc["provenance"] = provenance()
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
