"""Does each tier's generated spec run, and does its measured peak land in the tier's band?

    python benchmarks/tier_fit.py [SPEC] [--steps 3] [--out DIR] [--json]

1. ``trm analyze SPEC --generate-configs DIR --json`` fits SPEC (default: the paper's Sudoku
   MLP recipe) to the three tiers and records the host memory budget it planned against;
2. each generated spec runs unchanged with ``trm run FILE --mode TIER --max-steps N`` in its
   own process; the first builds the spec's data in its run directory, the later ones read
   those with ``--set data.dir=...`` (same data, not built three times);
3. the measured peak is the run process's maximum resident size (``ru_maxrss`` from
   ``os.wait4``, which covers the whole process: imports, any data build, training), as a
   share of the budget. The band for a tier with target T is [T - 15 points, T].
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from provenance import provenance

BAND_POINTS = 0.15


def run_tier(path: Path, mode: str, steps: int, out: Path, data_dir: Path | None) -> dict:
    trm = [sys.executable, "-m", "trm"]
    command = [*trm, "run", str(path), "--mode", mode, "--max-steps", str(steps), "--out", str(out)]
    if data_dir is not None:
        command += ["--set", f"data.dir={data_dir}"]
    started = time.perf_counter()
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "seconds": round(time.perf_counter() - started, 1),
        "log": str(out.with_suffix(".log")),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="sudoku-extreme-mlp")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/tier-fit"))
    parser.add_argument("--only", help="comma-separated tiers to run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configs = args.out / "configs"
    analyzed = subprocess.run(
        [
            sys.executable,
            "-m",
            "trm",
            "analyze",
            args.spec,
            "--generate-configs",
            str(configs),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    plan = json.loads(analyzed.stdout)
    rows = []
    data_dir: Path | None = None
    wanted = set(args.only.split(",")) if args.only else None
    for tier, path in zip(plan["tiers"], plan["generated_configs"], strict=True):
        mode = tier["mode"]
        if wanted and mode not in wanted:
            continue
        result = run_tier(Path(path), mode, args.steps, args.out / mode, data_dir)
        if data_dir is None and (args.out / mode / "data").is_dir():
            data_dir = (args.out / mode / "data").resolve()
        budget = tier["budget_bytes"]
        share = result["peak_rss_bytes"] / budget
        target = tier["target_fraction"]
        row = {
            "mode": mode,
            "config": path,
            "micro_batch_size": tier["micro_batch_size"],
            "precision": tier["precision"],
            "budget_bytes": budget,
            "predicted_bytes": tier["predicted_bytes"],
            "predicted_share": tier["budget_share"],
            "measured_share": share,
            "band": [target - BAND_POINTS, target],
            "in_band": target - BAND_POINTS <= share <= target and result["exit_code"] == 0,
            **result,
        }
        rows.append(row)
        if not args.json:
            print(
                f"{mode:<13} micro {row['micro_batch_size']:>4} {row['precision']:<5} exit "
                f"{row['exit_code']}  predicted {row['predicted_share']:.1%}  measured "
                f"{share:.1%}  band [{target - BAND_POINTS:.0%}, {target:.0%}]  "
                f"{'ok' if row['in_band'] else 'MISS'}  ({row['seconds']} s)",
                flush=True,
            )
    if args.json:
        document = {"spec": args.spec, "rows": rows, "provenance": provenance()}
        print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
