"""Sudoku grids: box geometry, the dataset token encoding, text parsing and rendering.

A grid is an ``(size, size)`` uint8 array of digits, 0 for a blank. The dataset encoding is the
reference one: token = digit + 1 (blank → 1, digits 1..size → 2..size+1), pad = 0, so
``vocab_size = size + 2`` and ``seq_len = size * size``; labels are the full solution.
"""

from __future__ import annotations

import numpy as np

from trm.errors import TrmError

# (rows, columns) of one box for each supported grid size.
BOX_SHAPES: dict[int, tuple[int, int]] = {4: (2, 2), 6: (2, 3), 9: (3, 3)}
SIZES = tuple(BOX_SHAPES)
PAD_TOKEN = 0
BLANK_TOKEN = 1
IGNORE_LABEL_ID = 0
_IGNORED_CHARS = " \t\r\n|-+"
_BLANK_CHARS = ".0"


def box_shape(size: int) -> tuple[int, int]:
    """``(box_rows, box_cols)`` for a supported size; TrmError otherwise."""
    try:
        return BOX_SHAPES[size]
    except KeyError:
        raise TrmError(f"Sudoku size {size} is not supported; use 4, 6 or 9") from None


def vocab_size(size: int) -> int:
    """Number of tokens: pad, blank and the digits 1..size."""
    return size + 2


def seq_len(size: int) -> int:
    return size * size


def size_from_seq_len(length: int) -> int:
    """The grid size whose cell count is ``length``; TrmError for other lengths."""
    for size in SIZES:
        if size * size == length:
            return size
    raise TrmError(
        f"seq_len {length} is not a Sudoku grid; expected 16 (4x4), 36 (6x6) or 81 (9x9)"
    )


def box_index(size: int, row: int, col: int) -> int:
    """Index of the box holding cell (row, col), boxes numbered row-major."""
    box_rows, box_cols = box_shape(size)
    return (row // box_rows) * (size // box_cols) + col // box_cols


def encode(digits: np.ndarray) -> np.ndarray:
    """Tokens of a grid ``(n, n)`` or batch ``(..., n, n)``: cells flattened, digit + 1, uint8."""
    digits = np.asarray(digits)
    flat = digits.reshape(*digits.shape[:-2], digits.shape[-1] * digits.shape[-2])
    if flat.dtype == np.uint8:  # the same wrap-around as below, without an int64 copy
        return flat + np.uint8(1)
    return (flat.astype(np.int64) + 1).astype(np.uint8)


def decode(tokens: np.ndarray) -> np.ndarray:
    """Digits ``(n, n)`` of one token row; tokens that are not blank or a digit become -1."""
    tokens = np.asarray(tokens).astype(np.int64).ravel()
    size = size_from_seq_len(tokens.size)
    digits = tokens - 1
    digits[(tokens < BLANK_TOKEN) | (tokens > size + 1)] = -1
    return digits.reshape(size, size)


def parse_text(text: str, size: int | None = None) -> np.ndarray:
    """Parse a puzzle's text into a digit grid (a text is never read as a file name:
    ``trm solve`` and ``Model.solve`` read puzzle files themselves).

    Cells are read row by row: ``1``..``9`` for clues, ``.`` or ``0`` for blanks; whitespace
    and ``| - +`` are ignored, so :func:`render` output parses back. ``size`` defaults to the
    size implied by the cell count. Raises TrmError for a wrong cell count, a character that
    is not a cell, a digit too large, or a digit repeated in a row, column or box.
    """
    source = "puzzle"
    cells = [ch for ch in text if ch not in _IGNORED_CHARS]
    counts = {s * s: s for s in SIZES}
    if size is not None:
        box_shape(size)
        counts = {size * size: size}
    if len(cells) not in counts:
        expected = ", ".join(str(c) for c in counts)
        hint = ""
        if source == "puzzle" and any(not ch.isdigit() and ch != "." for ch in cells):
            hint = "; if it is a file path, that file does not exist"
        raise TrmError(
            f"{source} has {len(cells)} cells after removing separators; expected {expected} "
            f"(use '.' or '0' for blanks){hint}"
        )
    size = counts[len(cells)]
    digits = np.zeros(size * size, dtype=np.uint8)
    for index, ch in enumerate(cells):
        if ch in _BLANK_CHARS:
            continue
        if not ("1" <= ch <= "9"):
            raise TrmError(
                f"{source} has {ch!r} at cell {index + 1}; use digits 1-{size} and '.' or '0' "
                "for blanks"
            )
        if int(ch) > size:
            raise TrmError(
                f"{source} has digit {ch} at cell {index + 1}, too large for a {size}x{size} "
                f"Sudoku (digits 1-{size})"
            )
        digits[index] = int(ch)
    grid = digits.reshape(size, size)
    conflict = find_conflict(grid)
    if conflict:
        raise TrmError(f"{source} is not a valid Sudoku: {conflict}")
    return grid


def find_conflict(grid: np.ndarray) -> str | None:
    """Describe the first digit repeated in a row, column or box; None when there is none."""
    grid = np.asarray(grid)
    size = grid.shape[0]
    box_rows, box_cols = box_shape(size)
    for name, units in (
        ("row", list(grid)),
        ("column", list(grid.T)),
        ("box", list(_boxes(grid, box_rows, box_cols))),
    ):
        for number, unit in enumerate(units, start=1):
            clues = unit[unit > 0]
            values, counts = np.unique(clues, return_counts=True)
            if (counts > 1).any():
                return f"digit {int(values[counts > 1][0])} appears twice in {name} {number}"
    return None


def _boxes(grid: np.ndarray, box_rows: int, box_cols: int) -> np.ndarray:
    """The boxes of a grid as rows of cells, boxes row-major: shape ``(size, size)``."""
    size = grid.shape[0]
    return (
        grid.reshape(size // box_rows, box_rows, size // box_cols, box_cols)
        .transpose(0, 2, 1, 3)
        .reshape(size, size)
    )


def render(grid: np.ndarray) -> str:
    """Render digits as text rows with box separators; blanks ``.``, invalid cells ``?``."""
    grid = np.asarray(grid)
    size = grid.shape[0]
    box_rows, box_cols = box_shape(size)
    stacks = size // box_cols
    lines = []
    for row in range(size):
        if row and row % box_rows == 0:
            lines.append("+".join(["-" * (2 * box_cols + 1)] * stacks)[1:-1])
        chars = []
        for col in range(size):
            if col and col % box_cols == 0:
                chars.append("|")
            value = int(grid[row, col])
            chars.append("." if value == 0 else str(value) if 1 <= value <= size else "?")
        lines.append(" ".join(chars))
    return "\n".join(lines)
