"""Validity-preserving Sudoku augmentations, applied identically to question and solution.

Each copy draws: a relabelling of the digits 1..size (blanks stay blank), a permutation of the
bands (box rows) and of the rows within each band, a permutation of the stacks (box columns)
and of the columns within each stack, and — only when boxes are square (4x4, 9x9) — a
transpose with probability 1/2. These map valid grids to valid grids and a puzzle's unique
solution to the transformed puzzle's unique solution.
"""

from __future__ import annotations

import numpy as np

from trm.plugins.tasks.sudoku.grid import box_shape


def _line_permutations(
    rng: np.random.Generator, copies: int, groups: int, per_group: int
) -> np.ndarray:
    """``(copies, groups * per_group)`` line orders: groups shuffled, lines shuffled within."""
    group_order = rng.permuted(np.tile(np.arange(groups), (copies, 1)), axis=1)
    within = rng.permuted(np.tile(np.arange(per_group), (copies, groups, 1)), axis=2)
    return (group_order[:, :, None] * per_group + within).reshape(copies, groups * per_group)


def augment_copies(
    question: np.ndarray, solution: np.ndarray, rng: np.random.Generator, copies: int
) -> tuple[np.ndarray, np.ndarray]:
    """``copies`` independent augmentations: two ``(copies, size, size)`` arrays (input dtype)."""
    question = np.asarray(question)
    solution = np.asarray(solution)
    size = question.shape[0]
    box_rows, box_cols = box_shape(size)
    digit_maps = np.concatenate(
        [
            np.zeros((copies, 1), dtype=np.int64),
            rng.permuted(np.tile(np.arange(1, size + 1), (copies, 1)), axis=1),
        ],
        axis=1,
    )
    row_orders = _line_permutations(rng, copies, size // box_rows, box_rows)
    col_orders = _line_permutations(rng, copies, size // box_cols, box_cols)
    square_boxes = box_rows == box_cols
    transpose = rng.random(copies) < 0.5 if square_boxes else np.zeros(copies, dtype=bool)
    which = np.arange(copies)[:, None, None]

    def apply(grid: np.ndarray) -> np.ndarray:
        stacked = np.where(transpose[:, None, None], grid.T[None], grid[None])
        moved = stacked[which, row_orders[:, :, None], col_orders[:, None, :]]
        relabelled = np.take_along_axis(digit_maps, moved.reshape(copies, -1).astype(np.int64), 1)
        return relabelled.reshape(copies, size, size).astype(grid.dtype)

    return apply(question), apply(solution)


def augment(
    question: np.ndarray, solution: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One random augmentation of a ``(size, size)`` digit grid pair (0 = blank)."""
    questions, solutions = augment_copies(question, solution, rng, 1)
    return questions[0], solutions[0]
