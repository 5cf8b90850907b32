"""Time the Sudoku generator: N unique-solution puzzles with at most C clues.

Usage: python benchmarks/sudoku_generation.py [--count 1000] [--clues 0] [--size 9]
[--workers 0] [--seed 0] [--json]. Prints a small table, or with --json one JSON object.
Only generation is timed; uniqueness, clue counts and backtracks are checked afterwards.
``--clues 0`` (the default) is the size's default, as for ``trm data build sudoku`` (9x9: 30).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from tables import print_record

from trm.data.generation import resolve_workers
from trm.errors import TrmError
from trm.plugins.tasks.sudoku.generator import generate_many
from trm.plugins.tasks.sudoku.solver import is_valid_solution, solve
from trm.plugins.tasks.sudoku.source import DEFAULT_CLUES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="puzzles to generate")
    parser.add_argument(
        "--clues", type=int, default=0, help="most clues per puzzle (0 = the size's default)"
    )
    parser.add_argument("--size", type=int, default=9, help="grid size: 4, 6 or 9")
    parser.add_argument("--min-backtracks", type=int, default=0, help="hardness knob")
    parser.add_argument("--workers", type=int, default=0, help="processes (0 = all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    args.clues = args.clues or DEFAULT_CLUES.get(args.size, 0)
    workers = resolve_workers(args.workers)
    started_s = time.perf_counter()
    try:
        questions, solutions = generate_many(
            args.count, args.size, args.clues, args.min_backtracks, seed=args.seed, workers=workers
        )
    except TrmError as exc:
        parser.error(str(exc))
    seconds = time.perf_counter() - started_s

    clues = (questions > 0).sum(axis=(1, 2))
    results = [solve(q, limit=2) for q in questions]
    unique = all(r.count == 1 for r in results)
    valid = all(is_valid_solution(q, s) for q, s in zip(questions, solutions, strict=True))
    report = {
        "count": args.count,
        "size": args.size,
        "clues": args.clues,
        "workers": workers,
        "seconds": round(seconds, 3),
        "puzzles_per_s": round(args.count / seconds, 1),
        "mean_clues": round(float(clues.mean()), 2),
        "max_clues_seen": int(clues.max()),
        "mean_backtracks": round(float(np.mean([r.backtracks for r in results])), 2),
        "all_unique": unique,
        "all_valid": valid,
    }
    if args.json:
        print(json.dumps(report))
        return
    columns = (
        "count",
        "clues",
        "workers",
        "seconds",
        "puzzles_per_s",
        "mean_clues",
        "mean_backtracks",
    )
    print_record(report, columns)
    print(
        f"all unique: {unique}; all solutions valid: {valid}; most clues: "
        f"{report['max_clues_seen']}"
    )


if __name__ == "__main__":
    main()
