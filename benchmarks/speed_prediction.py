"""Does `trm analyze` predict the speed `trm run` then shows? (issue: within 25%)

Usage: python benchmarks/speed_prediction.py [--spec quickstart] [--mode balanced]
[--steps 100] [--json]. Runs `trm analyze SPEC --json` (which times a few steps of each tier's
spec with the real loop), then `trm run SPEC --mode MODE --max-steps STEPS` into a temporary
directory, and compares the tier's predicted samples/s with the median samples_per_s of the
run's training rows after the first ten (warm-up). Prints a table, or one JSON document.
Each command is a fresh process, as a user would run them; run it on an idle machine.
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

WARMUP_ROWS = 10


def trm(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "trm", *args]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"trm {' '.join(args)} failed with exit code {done.returncode}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="quickstart")
    parser.add_argument("--mode", default="balanced")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.steps <= WARMUP_ROWS:
        parser.error(f"--steps must be more than the {WARMUP_ROWS} warm-up rows it leaves out")
    with tempfile.TemporaryDirectory(prefix="trm-speed-check-") as tmp:
        work = Path(tmp)
        analysis = json.loads(trm("analyze", args.spec, "--json", cwd=work).stdout)
        tier = next(t for t in analysis["tiers"] if t["mode"] == args.mode)
        run_dir = work / "run"
        trm(
            "run",
            args.spec,
            "--mode",
            args.mode,
            "--max-steps",
            str(args.steps),
            "--out",
            str(run_dir),
            cwd=work,
        )
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        rates = [r["samples_per_s"] for r in rows if "kind" not in r][WARMUP_ROWS:]
    measured = statistics.median(rates)
    predicted = tier["samples_per_s"]
    report = {
        "machine": {"machine": platform.machine(), "processor": platform.processor()},
        "spec": args.spec,
        "mode": args.mode,
        "predicted_samples_per_s": predicted,
        "prediction_source": tier["samples_per_s_source"],
        "run_median_samples_per_s": measured,
        "run_rows": len(rates),
        "error": predicted / measured - 1.0,
        "within_25_percent": abs(predicted / measured - 1.0) <= 0.25,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'spec':<14}{'mode':<10}{'predicted':>11}{'run':>10}{'error':>9}  source")
    print(
        f"{args.spec:<14}{args.mode:<10}{predicted:>11.1f}{measured:>10.1f}"
        f"{report['error']:>+9.1%}  {report['prediction_source']}"
    )


if __name__ == "__main__":
    main()
