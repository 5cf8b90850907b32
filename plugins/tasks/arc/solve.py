"""``trm solve CHECKPOINT TASK`` for ARC: every version of a task's test inputs, one vote.

TASK is a task id of the dataset's ``test_puzzles.json`` or a task JSON file (one task
``{"train": [...], "test": [...]}``, id = the file's stem, or ``{task_id: task}`` with one
entry). A task of the dataset (by id, or a file whose test inputs are those of a dataset
task) is solved from all its rows in the test split — each augmented version with its own
puzzle identifier, the answers voted on as in evaluation (:mod:`~trm.plugins.tasks.arc.evaluator`).
Any other task is solved from its test inputs as given, under the blank puzzle identifier:
the model never trained a puzzle embedding for it, so its answer is a guess, and the output
says so.

Shown: per test input the input, the two attempts (votes, mean confidence) and, when the
solution is known, the solution and whether each attempt is right; a PNG of the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from trm.data.evaluator import RunRows, TaskSolution
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.errors import TrmError
from trm.plugins.tasks.arc import grids, render
from trm.plugins.tasks.arc.evaluator import (
    TEST_PUZZLES_FILE,
    ArcEvaluator,
    ArcTestSet,
    Candidate,
)
from trm.plugins.tasks.arc.tasks import ArcTask, parse_task

TEST_SPLIT = "test"
# Task ids listed in the error for an unknown id.
LISTED_IDS = 5


def _task_from_file(path: Path) -> ArcTask:
    """The one task a JSON file holds; TrmError when it holds none or several."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrmError(f"task file {path} cannot be read as JSON ({exc})") from None
    except RecursionError:
        raise TrmError(f"task file {path} is not an ARC task: its JSON nests too deeply") from None
    if isinstance(document, dict) and "train" in document and "test" in document:
        return parse_task(path.stem, document, f"task file {path}")
    if isinstance(document, dict) and len(document) == 1:
        ((task_id, task),) = document.items()
        return parse_task(str(task_id), task, f"task file {path}")
    raise TrmError(
        f'task file {path} must hold one ARC task ({{"train": [...], "test": [...]}}, or '
        "{task_id: task} with one entry)"
    )


def _dataset_tasks(data_dir: Path | None) -> ArcTestSet | None:
    """The dataset's names and test tasks; None without a dataset or its test tasks."""
    if data_dir is None or not (data_dir / TEST_PUZZLES_FILE).is_file():
        return None
    return ArcTestSet.from_dataset(data_dir)


def _same_test_inputs(a: ArcTask, b: ArcTask) -> bool:
    keys = [[grids.grid_key(i) for i, _ in task.test] for task in (a, b)]
    return keys[0] == keys[1]


def find_task(argument: str, data_dir: Path | None) -> tuple[ArcTask, ArcTestSet | None]:
    """The task TASK names and, when it is a task of the dataset, the dataset's test set."""
    dataset = _dataset_tasks(data_dir)
    path = Path(argument).expanduser()
    if path.is_file():
        task = _task_from_file(path)
        if dataset is None:
            return task, None
        known = dataset.tasks.get(task.task_id)
        if known is not None and _same_test_inputs(known, task):
            return known, dataset
        for other in dataset.tasks.values():
            if _same_test_inputs(other, task):
                return other, dataset
        return task, None
    if dataset is None:
        where = "no dataset" if data_dir is None else f"no {data_dir / TEST_PUZZLES_FILE}"
        raise TrmError(
            f"task {argument!r} is not a file, and there is {where} to look its id up in; "
            "give a task JSON file, or the dataset with --data DIR"
        )
    if argument not in dataset.tasks:
        some = ", ".join(list(dataset.tasks)[:LISTED_IDS])
        raise TrmError(
            f"task {argument!r} is not one of the {len(dataset.tasks)} test tasks of "
            f"{data_dir / TEST_PUZZLES_FILE} (e.g. {some}); give one of them or a task JSON file"
        )
    return dataset.tasks[argument], dataset


def dataset_rows(
    task_id: str, dataset: ArcTestSet, data_dir: Path
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and puzzle identifiers of every test-split row of ``task_id``'s versions."""
    ids = [
        i
        for i, name in enumerate(dataset.names)
        if name == task_id or name.startswith(task_id + grids.SEPARATOR)
    ]
    index = SplitIndex(open_split(data_dir / TEST_SPLIT))
    puzzles = np.nonzero(np.isin(index.puzzle_identifier, ids))[0]
    starts, ends = index.puzzle_start[puzzles], index.puzzle_start[puzzles + 1]
    examples = np.concatenate(
        [np.arange(s, e, dtype=np.int64) for s, e in zip(starts, ends, strict=True)]
        or [np.zeros(0, dtype=np.int64)]
    )
    rows = index.gather(examples)
    return rows["inputs"], rows["puzzle_identifiers"]


def plain_rows(task: ArcTask, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The task's test inputs as given, each one row under the blank identifier 0."""
    side = grids.side_of(seq_len)
    try:
        inputs = np.stack([grids.encode(grid_in, side=side) for grid_in, _ in task.test])
    except ValueError as exc:
        raise TrmError(
            f"task {task.task_id}: a test input does not fit the model's {side}x{side} "
            f"canvas ({exc})"
        ) from None
    return inputs.astype(np.int64), np.zeros(len(task.test), dtype=np.int64)


def solve_task(
    argument: str, data_dir: Path | None, seq_len: int, run: RunRows, picture: Path | None
) -> TaskSolution:
    """Solve the task TASK names (see the module docstring); writes the PNG to ``picture``
    (default ``<task_id>.png`` in the current folder)."""
    task, dataset = find_task(argument, data_dir)
    inputs = identifiers = None
    if dataset is not None and data_dir is not None:
        inputs, identifiers = dataset_rows(task.task_id, dataset, data_dir)
    in_dataset = inputs is not None and len(inputs) > 0
    if not in_dataset:
        inputs, identifiers = plain_rows(task, seq_len)
        # identifier 0 names the task itself: its rows are the original (k 0, same colours)
        dataset = ArcTestSet([task.task_id], [task])
    assert dataset is not None and inputs is not None and identifiers is not None
    predictions, confidences = run(inputs, identifiers)
    evaluator = ArcEvaluator(dataset)
    evaluator.add(inputs, identifiers, predictions, confidences)
    tests = [_test_report(evaluator, task, n) for n in range(len(task.test))]
    target = Path(picture) if picture is not None else Path(f"{task.task_id}.png")
    replaced = target.exists()
    _write_picture(target, task, tests)
    document = {
        "task": task.task_id,
        "in_dataset": in_dataset,
        "rows": len(inputs),
        "tests": [t["document"] for t in tests],
        "picture": str(target),
        "picture_replaced": replaced,
    }
    return TaskSolution(document, _view(task, tests, in_dataset, len(inputs)), target)


def _test_report(evaluator: ArcEvaluator, task: ArcTask, n: int) -> dict[str, Any]:
    grid_in, solution = task.test[n]
    ranked = evaluator.candidates(task.task_id, n)
    attempts = evaluator.attempts(task.task_id, n)
    shown: list[Candidate | None] = [ranked[a] if a < len(ranked) else None for a in range(2)]
    correct = [None if solution is None else bool(np.array_equal(g, solution)) for g in attempts]
    document = {
        "input": grid_in.tolist(),
        "solution": None if solution is None else solution.tolist(),
        "candidates": len(ranked),
    }
    for a, grid in enumerate(attempts):
        c = shown[a]
        document[f"attempt_{a + 1}"] = grid.tolist()
        document[f"votes_{a + 1}"] = 0 if c is None else c.votes
        document[f"confidence_{a + 1}"] = None if c is None else c.confidence
        document[f"correct_{a + 1}"] = correct[a]
    return {"document": document, "attempts": attempts, "shown": shown, "correct": correct}


def _caption(a: int, candidate: Candidate | None, correct: bool | None) -> Text:
    """A column title: the attempt, its votes and mean confidence, and its verdict."""
    text = Text(f"attempt {a + 1}\n")
    if candidate is None:
        text.append("no answer" if a == 0 else "= attempt 1")
    else:
        votes = f"{candidate.votes} vote" + ("" if candidate.votes == 1 else "s")
        text.append(f"{votes}, conf. {candidate.confidence:.3f}")
    if correct is not None:
        text.append("\nright" if correct else "\nwrong", style="bold green" if correct else "red")
    return text


def _view(task: ArcTask, tests: list[dict[str, Any]], in_dataset: bool, rows: int) -> Group:
    parts: list[Any] = []
    if in_dataset:
        parts.append(Text(f"task {task.task_id}: {rows} rows (augmented versions) voted"))
    else:
        parts.append(
            Text(
                f"task {task.task_id} is not in the checkpoint's dataset: solved from its test "
                "input(s) under the blank puzzle identifier — the model learned no embedding "
                "for it, so the answer is a guess",
                style="yellow",
            )
        )
    for n, t in enumerate(tests):
        table = Table(box=None, padding=(0, 2), show_edge=False)
        table.add_column(f"test input {n + 1}")
        for a in range(2):
            table.add_column(_caption(a, t["shown"][a], t["correct"][a]))
        solution = task.test[n][1]
        if solution is not None:
            table.add_column("solution")
        cells = [render.grid_text(task.test[n][0])]
        cells += [render.grid_text(g) for g in t["attempts"]]
        if solution is not None:
            cells.append(render.grid_text(solution))
        table.add_row(*cells)
        parts.append(table)
    return Group(*parts)


def _write_picture(target: Path, task: ArcTask, tests: list[dict[str, Any]]) -> None:
    rows = []
    for n, t in enumerate(tests):
        grid_in, solution = task.test[n]
        row = [(grid_in, None)]
        row += [
            (g, render.frame_colour(c)) for g, c in zip(t["attempts"], t["correct"], strict=True)
        ]
        if solution is not None:
            row.append((solution, None))
        rows.append(row)
    try:
        render.write_png(target, render.panel_rows(rows))
    except OSError as exc:
        raise TrmError(
            f"the picture {target} cannot be written ({exc.strerror or exc}); give another "
            "path with --png FILE"
        ) from None
