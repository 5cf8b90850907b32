"""Sudoku plugin (on by default): registers the ``sudoku`` data source.

Puzzles of size 4, 6 or 9, generated with a unique solution or read from a sudoku-extreme CSV,
written in the reference puzzle-dataset format (:mod:`trm.data.puzzle_dataset`).
"""

from __future__ import annotations

from trm import hookimpl
from trm.plugins.tasks.sudoku.source import SudokuSource

ACTIVATION = "default"


@hookimpl
def register_data_sources() -> list[SudokuSource]:
    """The Sudoku source."""
    return [SudokuSource()]
