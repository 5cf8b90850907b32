"""The symmetries of a Sudoku that keep its solution, as cell and token maps
(:class:`trm.data.symmetry.CellSymmetry`) for answers tried again under them.

One drawn map composes, each drawn uniformly: a relabelling of the digits (blanks and pad
stay), a permutation of the bands (box rows) and of the rows within each band, a permutation of
the stacks (box columns) and of the columns within each stack, and — where boxes are square
(4x4, 9x9) — a transposition with probability 1/2. Each maps a valid grid to a valid grid, and
the unique solution of a puzzle to the unique solution of its image.
"""

from __future__ import annotations

import numpy as np

from trm.data.symmetry import CellSymmetry
from trm.plugins.tasks.sudoku.grid import BLANK_TOKEN, box_shape, vocab_size


def line_order(rng: np.random.Generator, groups: int, per_group: int) -> np.ndarray:
    """An order of ``groups * per_group`` lines: the groups shuffled, the lines within each."""
    group_order = rng.permutation(groups)
    return np.concatenate([g * per_group + rng.permutation(per_group) for g in group_order])


def grid_symmetry(
    size: int, rows: np.ndarray, cols: np.ndarray, digits: np.ndarray, transpose: bool
) -> CellSymmetry:
    """The map: transpose (when asked), then take row ``rows[i]`` as row ``i`` and column
    ``cols[j]`` as column ``j``, then relabel digit ``d`` (1..size) as ``digits[d - 1]``."""
    cells = np.arange(size * size).reshape(size, size)
    if transpose:
        cells = cells.T
    positions = cells[np.asarray(rows)[:, None], np.asarray(cols)[None, :]].ravel()
    tokens = np.arange(vocab_size(size))
    tokens[BLANK_TOKEN + 1 :] = np.asarray(digits) + BLANK_TOKEN
    return CellSymmetry(positions=positions, tokens=tokens)


def draw(size: int, rng: np.random.Generator) -> CellSymmetry:
    """One map drawn from every family at once (see the module docstring)."""
    box_rows, box_cols = box_shape(size)
    rows = line_order(rng, size // box_rows, box_rows)
    cols = line_order(rng, size // box_cols, box_cols)
    digits = rng.permutation(np.arange(1, size + 1))
    transpose = box_rows == box_cols and bool(rng.random() < 0.5)
    return grid_symmetry(size, rows, cols, digits, transpose)


def draw_many(size: int, count: int, rng: np.random.Generator) -> list[CellSymmetry]:
    """``count`` maps drawn one after another, each drawn again while it is the identity."""
    drawn: list[CellSymmetry] = []
    while len(drawn) < count:
        symmetry = draw(size, rng)
        if not symmetry.is_identity():
            drawn.append(symmetry)
    return drawn
