"""How long the loop waits for its data, with and without prefetching, from a cold page cache.

Usage: python benchmarks/data_pipeline.py --data DIR [--spec sudoku-extreme-mlp]
[--prefetch 0,4] [--steps 20] [--batch 32] [--skip 3] [--no-drop-caches] [--json].

For each prefetch setting: the page cache is dropped (``sync; echo 3 >
/proc/sys/vm/drop_caches``, root only; the report says whether it was), then ``trm run SPEC
--set data.dir=DIR --set data.reader=stream --set data.prefetch_steps=P --max-steps STEPS``
runs in a fresh process with a global batch of BATCH (the spec's model unchanged), and the
share of step time spent waiting for the batch is read from metrics.jsonl
(``data_wait_s`` over the step's wall time, ``global batch / samples_per_s``), skipping the
first SKIP steps (compilation). Prints a table, or one JSON document with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from provenance import provenance


def drop_caches() -> bool:
    """Empty the page cache (root only); False where that is not allowed."""
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def one_run(args: argparse.Namespace, prefetch: int, work: Path) -> dict[str, Any]:
    cold = drop_caches() if args.drop_caches else False
    run_dir = work / f"prefetch-{prefetch}"
    command = [sys.executable, "-m", "trm", "run", args.spec, "--out", str(run_dir)]
    command += ["--max-steps", str(args.steps), "--plugins", "no:checkpoint"]
    for setting in (
        f"data.dir={args.data}",
        "data.reader=stream",
        f"data.prefetch_steps={prefetch}",
        f"train.global_batch_size={args.batch}",
        "train.eval_interval=0",
        "data.eval_split=none",
    ):
        command += ["--set", setting]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"trm run failed with exit code {done.returncode}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "kind" not in r][args.skip :]
    step_s = [args.batch / r["samples_per_s"] for r in steps]
    wait_s = [r["data_wait_s"] for r in steps]
    return {
        "prefetch_steps": prefetch,
        "cold_cache": cold,
        "steps": len(steps),
        "mean_step_s": sum(step_s) / len(step_s),
        "mean_data_wait_s": sum(wait_s) / len(wait_s),
        "max_data_wait_s": max(wait_s),
        "data_wait_share": sum(wait_s) / sum(step_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a built dataset (e.g. 6 GB of Sudoku)")
    parser.add_argument("--spec", default="sudoku-extreme-mlp")
    parser.add_argument("--prefetch", default="0,4", help="prefetch_steps values to compare")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="global batch of the runs")
    parser.add_argument("--skip", type=int, default=3, help="first steps left out (compile)")
    parser.add_argument("--no-drop-caches", dest="drop_caches", action="store_false")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    size = sum(f.stat().st_size for f in Path(args.data, "train").glob("*__*.npy"))
    with tempfile.TemporaryDirectory(prefix="trm-data-pipeline-") as tmp:
        runs = [one_run(args, int(p), Path(tmp)) for p in args.prefetch.split(",")]
    if args.json:
        machine = {"machine": platform.machine(), "processor": platform.processor()}
        document = {"machine": machine, "spec": args.spec, "data": args.data, "runs": runs}
        document["train_split_bytes"] = size
        document["provenance"] = provenance()
        print(json.dumps(document, indent=2))
        return
    print(f"{args.spec} on {args.data} ({size / 2**30:.1f} GiB train split), batch {args.batch}")
    print(
        f"{'prefetch':>8}{'cold':>6}{'steps':>7}{'step s':>9}{'wait s':>9}"
        f"{'max wait':>10}{'share':>8}"
    )
    for r in runs:
        print(
            f"{r['prefetch_steps']:>8}{'yes' if r['cold_cache'] else 'no':>6}{r['steps']:>7}"
            f"{r['mean_step_s']:>9.3f}{r['mean_data_wait_s']:>9.4f}{r['max_data_wait_s']:>10.4f}"
            f"{r['data_wait_share']:>8.2%}"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
