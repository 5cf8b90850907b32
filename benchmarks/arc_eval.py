"""Time the ARC evaluator's own work per row: crop, un-augment, match, vote — without a model.

Usage: python benchmarks/arc_eval.py [--tasks 20] [--versions 200] [--batch 256] [--json]
[--out FILE].
Synthetic tasks (3-5 demonstrations, 1-2 test inputs, grids up to 5x5) get ``--versions``
random dihedral/colour versions each; their true outputs are fed as the model's answers, in
batches, as an evaluation would. Reports rows, seconds, microseconds per row, the time of
``result()`` + ``submission()``, and what that predicts for ARC-AGI-1's 385,815 test rows
(real grids are larger: the crop walks more rows, so treat it as a lower bound). The JSON
document carries a ``provenance`` block (benchmarks/provenance.py); ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from provenance import provenance

from trm.plugins.tasks.arc import grids
from trm.plugins.tasks.arc.evaluator import ArcEvaluator, ArcTestSet
from trm.plugins.tasks.arc.tasks import ArcTask

ARC_AGI_1_TEST_ROWS = 385_815


def _tasks(count: int, rng: np.random.Generator) -> list[ArcTask]:
    def grid() -> np.ndarray:
        h, w = rng.integers(2, 6, size=2)
        return rng.integers(0, 10, size=(h, w)).astype(np.uint8)

    tasks = []
    for n in range(count):
        pairs = [(g, np.fliplr(g).copy()) for g in (grid() for _ in range(4 + n % 2))]
        tasks.append(ArcTask(f"task{n:04d}", tuple(pairs[:3]), tuple(pairs[3:])))
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--versions", type=int, default=200)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the JSON document to this file")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    tasks = _tasks(args.tasks, rng)
    names, inputs, answers, ids = ["<blank>"], [], [], []
    for task in tasks:
        for _ in range(args.versions):
            k, cmap = int(rng.integers(8)), np.concatenate([[0], rng.permutation(9) + 1])
            names.append(grids.augmented_name(task.task_id, k, cmap))
            for grid_in, grid_out in task.test:
                inputs.append(grids.encode(grids.augment(grid_in, k, cmap)))
                answers.append(grids.encode(grids.augment(grid_out, k, cmap)))
                ids.append(len(names) - 1)
    inputs_a, answers_a, ids_a = np.stack(inputs), np.stack(answers), np.array(ids)
    confidences = rng.random(len(ids_a))
    evaluator = ArcEvaluator(ArcTestSet(names, tasks))
    started = time.perf_counter()
    for s in range(0, len(ids_a), args.batch):
        b = slice(s, s + args.batch)
        evaluator.add(inputs_a[b], ids_a[b], answers_a[b], confidences[b])
    add_s = time.perf_counter() - started
    started = time.perf_counter()
    result = evaluator.result()
    evaluator.submission()
    finish_s = time.perf_counter() - started
    per_row_us = add_s / len(ids_a) * 1e6
    report = {
        "rows": len(ids_a),
        "add_s": round(add_s, 3),
        "us_per_row": round(per_row_us, 1),
        "result_and_submission_s": round(finish_s, 4),
        "arc_agi_1_test_split_s": round(per_row_us * ARC_AGI_1_TEST_ROWS / 1e6, 1),
        "pass@2": result["pass@2"],
        "provenance": provenance(),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key:>26}  {value}")


if __name__ == "__main__":
    main()
