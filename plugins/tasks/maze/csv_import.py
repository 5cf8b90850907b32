"""Read and write mazes in the reference CSV layout.

A folder holds ``train.csv`` and ``test.csv``. Each file has the header ``source,q,a,rating``
and one maze per row: ``q`` is the maze, ``size * size`` characters row-major (``#`` wall,
space open, one ``S`` start, one ``G`` goal), ``a`` the same grid with ``o`` on the cells of the
S–G path. Every row is checked; the first bad one is a TrmError naming the file, its row number
(1 = the first maze, after the header) and its line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from trm.data.csv_records import csv_records
from trm.errors import TrmError
from trm.plugins.tasks.maze import grid

HEADER = ("source", "q", "a", "rating")
_QUESTION_TOKENS = (grid.WALL, grid.OPEN, grid.START, grid.GOAL)


def csv_files(path: Path) -> tuple[Path, Path]:
    """``(dir/train.csv, dir/test.csv)``; TrmError when the folder or a file is missing."""
    path = Path(path)
    if path.is_file():
        raise TrmError(
            f"{path} is a file; data.generate.csv names a folder holding train.csv and test.csv"
        )
    if not path.is_dir():
        raise TrmError(
            f"{path} does not exist; give a folder holding the maze train.csv and test.csv "
            "(data.generate.csv)"
        )
    files = (path / "train.csv", path / "test.csv")
    for file in files:
        if not file.is_file():
            raise TrmError(
                f"{file} does not exist; a maze CSV folder must hold train.csv and test.csv "
                "(data.generate.csv)"
            )
    return files


def row_problem(q: str, a: str, size: int) -> str | None:
    """What is wrong with one ``(q, a)`` pair of a ``size x size`` maze; None when it is fine."""
    cells = size * size
    if len(q) != cells or len(a) != cells:
        return (
            f"q and a must have {cells} characters (a {size}x{size} maze), got {len(q)} "
            f"and {len(a)}"
        )
    question, answer = grid.chars_to_tokens(q), grid.chars_to_tokens(a)
    for name, text, tokens, allowed in (
        ("q", q, question, _QUESTION_TOKENS),
        ("a", a, answer, (*_QUESTION_TOKENS, grid.PATH)),
    ):
        bad = np.flatnonzero(~np.isin(tokens, allowed))
        if bad.size:
            at = int(bad[0])
            path_note = "; 'o' belongs in a only" if name == "q" and text[at] == "o" else ""
            return f"{name} has {text[at]!r} at {_cell(at, size)}; use {grid.LEGEND}{path_note}"
    problem = grid.endpoint_problem(question)
    if problem:
        return f"q {problem}"
    differs = np.flatnonzero((answer != question) & (answer != grid.PATH))
    if differs.size:
        at = int(differs[0])
        return (
            f"a differs from q at {_cell(at, size)} ({a[at]!r} for {q[at]!r}); a must be q "
            "with 'o' on the path cells"
        )
    through = np.flatnonzero((answer == grid.PATH) & (question != grid.OPEN))
    if through.size:
        at = int(through[0])
        what = "a wall" if question[at] == grid.WALL else f"{q[at]!r}"
        return f"a's path goes through {what} at {_cell(at, size)}"
    valid, _ = grid.path_quality(question, answer)
    if not valid:
        return "a's 'o' cells do not form one unbroken path from S to G"
    return None


def _cell(index: int, size: int) -> str:
    return f"row {index // size + 1}, column {index % size + 1}"


def read_maze_csv(file: Path, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row of one file as ``(questions, labels)``: ``(n, size * size)`` uint8 tokens."""
    questions: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for number, line, fields in csv_records(file, HEADER, "a maze CSV file"):
        q, a = fields[1], fields[2]
        problem = row_problem(q, a, size)
        if problem:
            raise TrmError(f"{file} row {number} (line {line}): {problem}")
        questions.append(grid.chars_to_tokens(q))
        labels.append(grid.chars_to_tokens(a))
    if not questions:
        empty = np.zeros((0, size * size), dtype=np.uint8)
        return empty, empty.copy()
    return np.stack(questions), np.stack(labels)


def count_rows(file: Path) -> int:
    """The number of maze rows of a CSV file (rows after the header; blank lines skipped)."""
    try:
        with open(file, newline="", encoding="utf-8-sig") as f:
            return max(0, sum(1 for row in csv.reader(f) if row) - 1)
    except (OSError, UnicodeDecodeError, csv.Error):
        raise TrmError(f"cannot read {file} as a maze CSV file (data.generate.csv)") from None


def write_maze_csv(
    file: Path,
    questions: np.ndarray,
    labels: np.ndarray,
    source: str = "trm",
    ratings: Iterable[int] | None = None,
) -> None:
    """Write token rows in the reference layout (the inverse of :func:`read_maze_csv`).

    ``ratings`` defaults to each maze's shortest-path length in steps.
    """
    questions = np.asarray(questions).reshape(len(questions), -1)
    labels = np.asarray(labels).reshape(len(labels), -1)
    if ratings is None:
        ratings = [grid.shortest_distance(q) or 0 for q in questions]
    with open(file, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        for q, a, rating in zip(questions, labels, ratings, strict=True):
            writer.writerow([source, grid.tokens_to_chars(q), grid.tokens_to_chars(a), rating])
