"""A study on the quickstart, end to end: `trm sweep` over H_cycles x L_cycles x lr (a grid of
8 trials, a few hundred steps each, median pruning, 2 workers), then `trm report` on the study,
then the report page rendered by headless Chromium (a screenshot) when Chromium is installed.

    python benchmarks/sweep.py --out /tmp/study [--steps 300] [--workers 2] [--json] [--record FILE]

The dataset is built once (`trm data build sudoku`, the quickstart's options) and every trial
reads it (`data.dir`), so the trials differ only in their parameters. Prints the trials'
table; `--json` prints the document, `--record FILE` writes it (benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import provenance
from tables import print_rows

STUDY = """\
[study]
spec = "quickstart"
max_steps = {steps}
seed = 0

[study.fixed]
"data.dir" = "{data}"
"train.eval_interval" = {eval_interval}

[objective]
metric = "best_exact_accuracy"
direction = "maximize"

[pruner]
kind = "median"
startup_trials = 2
warmup_steps = {warmup}

[space]
"arch.H_cycles" = {{ grid = [1, 2] }}
"arch.L_cycles" = {{ grid = [2, 3] }}
"train.lr" = {{ grid = [3e-4, 1e-3] }}
"""


def trm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trm", *args], capture_output=True, text=True, check=False
    )


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def render(page: Path, png: Path) -> dict[str, Any]:
    """Screenshot ``page`` with headless Chromium; what came of it."""
    browser = chromium()
    if browser is None:
        return {"rendered": False, "why": "no Chromium on this machine"}
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--screenshot={png}",
            "--window-size=1200,3000",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    ok = done.returncode == 0 and png.is_file() and png.stat().st_size > 10_000
    return {
        "rendered": ok,
        "browser": browser,
        "screenshot": str(png),
        "bytes": png.stat().st_size if png.is_file() else 0,
    }


def _row(trial: dict[str, Any], keys: list[str]) -> list[str]:
    value, wall = trial["value"], trial["wall_s"]
    return [
        str(trial["number"]),
        trial["state"],
        *(str(trial["params"].get(k, "")) for k in keys),
        "" if value is None else f"{value:.4f}",
        "" if wall is None else f"{wall:.0f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the study's folder (replaced)")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per trial")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--record", type=Path, help="write the document to this file")
    args = parser.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    data = args.out / "data"
    built = trm("data", "build", "sudoku", "--size", "4", "--out", str(data))
    if built.returncode != 0:
        print(built.stderr, file=sys.stderr)
        return 1
    eval_interval = max(1, args.steps // 6)
    study = args.out / "quickstart-study.toml"
    study.write_text(
        STUDY.format(
            steps=args.steps, data=data, eval_interval=eval_interval, warmup=2 * eval_interval
        )
    )
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    command = [
        "sweep",
        str(study),
        "--out",
        str(args.out / "study"),
        "--workers",
        str(args.workers),
        "--json",
    ]
    swept = trm(*command)
    wall_s = time.monotonic() - started
    if swept.returncode != 0:
        print(swept.stderr[-3000:], file=sys.stderr)
        return 1
    result = json.loads(swept.stdout)
    reported = trm("report", str(args.out / "study"), "--json")
    page = args.out / "study" / "report" / "index.html"
    document = {
        "provenance": provenance(),
        "sweep_command": "trm " + " ".join(command),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "steps_per_trial": args.steps,
        "workers": args.workers,
        "study_file": study.read_text(),
        "wall_s": round(wall_s, 1),
        "counts": result["counts"],
        "best": result["best"],
        "trials": result["trials"],
        "report_plots": json.loads(reported.stdout)["plots"] if reported.returncode == 0 else None,
        "render": render(page, args.out / "report-page.png") if reported.returncode == 0 else None,
    }
    if args.record:
        args.record.write_text(json.dumps(document, indent=2) + "\n")
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    keys = ["arch.H_cycles", "arch.L_cycles", "train.lr"]
    rows = [_row(trial, keys) for trial in result["trials"]]
    print_rows(["trial", "state", *keys, "best exact", "wall s"], rows)
    cpu = document["provenance"]["machine"]["cpu_model"]
    print(f"{document['wall_s']} s in all on {cpu}; render: {document['render']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
