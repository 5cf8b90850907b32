"""Read Sudoku puzzles in the sudoku-extreme CSV layout.

Each file has the header ``source,question,answer,rating`` and one puzzle per row: ``question``
is 81 characters with ``.`` (or ``0``) for blanks, ``answer`` the 81-digit solution. A path is a
single CSV file or a directory holding ``train.csv`` and ``test.csv``. Rows are checked in
vectorised chunks (the full sudoku-extreme train file has 3.8 million); the first bad row is
reported as a TrmError naming the file and line.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np

from trm.data.csv_records import csv_records
from trm.errors import TrmError

HEADER = ("source", "question", "answer", "rating")
SIZE = 9
CELLS = SIZE * SIZE
_CHECK_ROWS = 100_000


def csv_files(path: Path) -> tuple[Path, Path | None]:
    """``(file, None)`` for a file, ``(dir/train.csv, dir/test.csv)`` for a directory."""
    path = Path(path)
    if path.is_file():
        return path, None
    if path.is_dir():
        train, test = path / "train.csv", path / "test.csv"
        for file in (train, test):
            if not file.is_file():
                raise TrmError(
                    f"{file} does not exist; a CSV directory must hold train.csv and test.csv "
                    "(data.generate.csv)"
                )
        return train, test
    raise TrmError(
        f"{path} does not exist; give a sudoku-extreme CSV file or directory (data.generate.csv)"
    )


def read_sudoku_csv(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """All rows of one CSV file as ``(questions, solutions)``: ``(n, 9, 9)`` uint8 digits."""
    file = Path(file)
    questions = bytearray()
    answers = bytearray()
    lines = array("q")
    for _number, line, fields in csv_records(file, HEADER, "a sudoku-extreme CSV file"):
        question, answer = fields[1], fields[2]
        if len(question) != CELLS or len(answer) != CELLS:
            raise TrmError(
                f"{file} line {line}: question and answer must have 81 characters, got "
                f"{len(question)} and {len(answer)}"
            )
        try:
            questions += question.encode("ascii")
            answers += answer.encode("ascii")
        except UnicodeEncodeError:
            raise TrmError(
                f"{file} line {line}: non-ASCII character in question or answer"
            ) from None
        lines.append(line)
    q = np.frombuffer(questions, dtype=np.uint8).reshape(-1, CELLS)
    a = np.frombuffer(answers, dtype=np.uint8).reshape(-1, CELLS)
    line_numbers = np.frombuffer(lines, dtype=np.int64) if len(lines) else np.zeros(0, np.int64)
    q_digits = np.empty(q.shape, dtype=np.uint8)
    a_digits = np.empty(a.shape, dtype=np.uint8)
    for start in range(0, q.shape[0], _CHECK_ROWS):
        stop = start + _CHECK_ROWS
        q_digits[start:stop], a_digits[start:stop] = _check_chunk(
            file, q[start:stop], a[start:stop], line_numbers[start:stop]
        )
    return q_digits.reshape(-1, SIZE, SIZE), a_digits.reshape(-1, SIZE, SIZE)


def _check_chunk(
    file: Path, q: np.ndarray, a: np.ndarray, lines: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Digits of a chunk of raw ASCII rows; TrmError naming the first bad row's line."""
    blank = (q == ord(".")) | (q == ord("0"))
    q_is_digit = (q >= ord("1")) & (q <= ord("9"))
    a_is_digit = (a >= ord("1")) & (a <= ord("9"))

    def fail(bad_rows: np.ndarray, message: str) -> None:
        if bad_rows.any():
            row = int(np.argmax(bad_rows))
            raise TrmError(f"{file} line {int(lines[row])}: {message}")

    fail(~(blank | q_is_digit).all(axis=1), "question must hold only 1-9 and '.' for blanks")
    fail(~a_is_digit.all(axis=1), "answer must hold only the digits 1-9")
    q_digits = np.where(blank, 0, q - ord("0")).astype(np.uint8)
    a_digits = (a - ord("0")).astype(np.uint8)
    fail(((q_digits != 0) & (q_digits != a_digits)).any(axis=1), "answer contradicts a clue")
    grids = np.left_shift(1, a_digits.astype(np.int32) - 1).reshape(-1, SIZE, SIZE)
    boxes = grids.reshape(-1, 3, 3, 3, 3).transpose(0, 1, 3, 2, 4).reshape(-1, SIZE, SIZE)
    full = (1 << SIZE) - 1
    valid = (
        (np.bitwise_or.reduce(grids, axis=2) == full).all(axis=1)
        & (np.bitwise_or.reduce(grids, axis=1) == full).all(axis=1)
        & (np.bitwise_or.reduce(boxes, axis=2) == full).all(axis=1)
    )
    fail(~valid, "answer repeats a digit in a row, column or box")
    return q_digits, a_digits
