"""Time the maze generator: N mazes of a preset (default: 1000 hard 30x30 mazes).

Usage: python benchmarks/maze_generation.py [--count 1000] [--preset hard] [--workers 0]
[--seed 0] [--json]. Prints a small table, or with --json one JSON object. Only generation
(``generate_many``, as ``trm data build maze`` calls it, worker start-up included) is timed;
afterwards every maze is checked: one S and one G, the shortest path at least ``min_path``
steps, the label's path valid and optimal, no two mazes alike up to rotation and mirroring.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
from provenance import provenance
from tables import print_record

from trm.data.generation import resolve_workers
from trm.plugins.tasks.maze import grid
from trm.plugins.tasks.maze.generator import generate_many
from trm.plugins.tasks.maze.source import PRESETS


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="mazes to generate")
    parser.add_argument("--preset", default="hard", choices=sorted(PRESETS), help="maze preset")
    parser.add_argument("--workers", type=int, default=0, help="processes (0 = all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    params = PRESETS[args.preset]
    workers = resolve_workers(args.workers)
    started_s = time.perf_counter()
    questions, labels = generate_many(args.count, params, seed=args.seed, workers=workers)
    seconds = time.perf_counter() - started_s

    lengths = np.array([grid.shortest_distance(q) or 0 for q in questions])
    quality = [grid.path_quality(q, a) for q, a in zip(questions, labels, strict=True)]
    keys = {grid.canonical_key(q, params.size) for q in questions}
    walls = (questions == grid.WALL).sum(axis=1)
    report = {
        "preset": args.preset,
        "count": args.count,
        "size": params.size,
        "workers": workers,
        "seconds": round(seconds, 3),
        "mazes_per_s": round(args.count / seconds, 1),
        "mean_path": round(float(lengths.mean()), 1),
        "shortest_path_seen": int(lengths.min()),
        "longest_path_seen": int(lengths.max()),
        "mean_walls": round(float(walls.mean()), 1),
        "all_long_enough": bool((lengths >= params.min_path).all()),
        "all_labels_optimal": all(valid and optimal for valid, optimal in quality),
        "all_distinct": len(keys) == args.count,
        "machine": {
            "machine": platform.machine(),
            "processor": _processor(),
            "cores": resolve_workers(0),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "provenance": provenance(),
    }
    if args.json:
        print(json.dumps(report))
        return
    columns = (
        "preset",
        "count",
        "workers",
        "seconds",
        "mazes_per_s",
        "mean_path",
        "mean_walls",
    )
    print_record(report, columns)
    print(
        f"paths {report['shortest_path_seen']}-{report['longest_path_seen']} steps; "
        f"all >= {params.min_path}: {report['all_long_enough']}; labels optimal: "
        f"{report['all_labels_optimal']}; all distinct: {report['all_distinct']}; machine: "
        f"{report['machine']['machine']} {report['machine']['processor'] or '?'} with "
        f"{report['machine']['cores']} cores"
    )


if __name__ == "__main__":
    main()
