"""Maze plugin (on by default): registers the ``maze`` data source.

Random-wall mazes (the reference's 30x30 "hard" set, an "easy" 10x10 set, or custom) whose
label draws a shortest path from S to G, generated or read from the reference's CSV files, and
written in the reference puzzle-dataset format (:mod:`trm.data.puzzle_dataset`).
"""

from __future__ import annotations

from trm import hookimpl
from trm.plugins.tasks.maze.source import MazeSource

ACTIVATION = "default"


@hookimpl
def register_data_sources() -> list[MazeSource]:
    """The maze source."""
    return [MazeSource()]
