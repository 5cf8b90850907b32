"""Time an ARC build and measure its peak memory: `trm data build arc` in a child process.

Usage: python benchmarks/arc_build.py [--augment 1000] [--version 1] [--concept DIR]
[--max-tasks 0] [--out DIR] [--keep] [--json]. ConceptARC defaults to ../shared/data/arc next to
the project (the paper's builds include it); ``--concept ''`` leaves it out. The child's wall
time and peak resident memory (``getrusage`` of the finished child: its largest RSS) are
reported with the counts of the written dataset and its size on disk. The output is deleted
afterwards unless ``--keep`` (the full ARC-AGI-1 build writes about 6.5 GB). Run it with
``nice`` on a shared machine: the build is one process on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tables import print_record

CONCEPT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "arc"


def _processor() -> str:
    """The CPU model (Linux's /proc/cpuinfo), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _max_rss_bytes(usage: resource.struct_rusage) -> int:
    """``ru_maxrss`` in bytes (kilobytes on Linux, bytes on macOS)."""
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _disk_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--augment", type=int, default=1000, help="versions per task")
    parser.add_argument("--version", type=int, default=1, choices=(1, 2))
    parser.add_argument("--concept", default=str(CONCEPT), help="ConceptARC folder ('' = none)")
    parser.add_argument("--max-tasks", type=int, default=0, help="tasks per subset (0 = all)")
    parser.add_argument("--out", help="output folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the built dataset")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="arc-build-"))
    out = root / "arc"
    command = [
        sys.executable, "-m", "trm", "data", "build", "arc", "--out", str(out),
        "--version", str(args.version), "--augment", str(args.augment),
        "--max-tasks", str(args.max_tasks), "--concept", args.concept,
    ]  # fmt: skip
    started_s = time.perf_counter()
    child = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started_s
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        sys.exit(f"the build failed ({child.returncode}): {child.stderr.strip()}")
    train = json.loads((out / "train" / "dataset.json").read_text())
    test = json.loads((out / "test" / "dataset.json").read_text())
    report = {
        "version": args.version,
        "augment": args.augment,
        "concept": bool(args.concept),
        "max_tasks": args.max_tasks,
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(_max_rss_bytes(usage) / 2**20, 1),
        "disk_mb": round(_disk_bytes(out) / 2**20, 1),
        "identifiers": train["num_puzzle_identifiers"],
        "train_groups": train["total_groups"],
        "train_examples": round(train["total_puzzles"] * train["mean_puzzle_examples"]),
        "test_groups": test["total_groups"],
        "test_examples": round(test["total_puzzles"] * test["mean_puzzle_examples"]),
        "machine": {
            "machine": platform.machine(),
            "processor": _processor(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
    }
    if not args.keep:
        shutil.rmtree(out)
        if not args.out:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
        return
    columns = (
        "version",
        "augment",
        "seconds",
        "peak_rss_mb",
        "disk_mb",
        "identifiers",
        "train_examples",
        "test_examples",
    )
    print_record(report, columns)
    print(
        f"ConceptARC: {report['concept']}; {report['train_groups']} train and "
        f"{report['test_groups']} test groups; machine: {report['machine']['machine']} "
        f"{report['machine']['processor'] or '?'}"
    )


if __name__ == "__main__":
    main()
