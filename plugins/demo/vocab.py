"""How a task's cells map to the model's tokens, written for a page in JavaScript.

The page (page/demo.js) encodes a puzzle a person typed or drew and decodes the model's
answers with this map alone; it is the ``vocab`` of the solver card (``trm-onnx.json``) and of
the served page's ``trm-demo.json``. The encodings are the data sources' (the reference's):

- ``sudoku``: ``{"pad": 0, "empty": 1, "digits": {"1": 2, ..., "N": N + 1}}``
- ``maze``: ``{"pad": 0, "wall": 1, "open": 2, "start": 3, "goal": 4, "path": 5}``
- ``arc``: ``{"pad": 0, "eos": 1, "colours": {"0": 2, ..., "9": 11}}``

tests/test_demo.py checks each against its source's ``parse_puzzle``.
"""

from __future__ import annotations

import math
from typing import Any

from trm.errors import TrmError

# The tasks the page can show, with the grid side of a row of seq_len tokens.
TASKS = ("sudoku", "maze", "arc")
ARC_COLOURS = 10


def task_vocab(task: str, seq_len: int) -> dict[str, Any]:
    """The cell-token map of ``task`` for rows of ``seq_len`` tokens; TrmError for a task
    the page cannot show."""
    side = math.isqrt(seq_len)
    if task == "sudoku":
        return {"pad": 0, "empty": 1, "digits": {str(d): d + 1 for d in range(1, side + 1)}}
    if task == "maze":
        return {"pad": 0, "wall": 1, "open": 2, "start": 3, "goal": 4, "path": 5}
    if task == "arc":
        return {"pad": 0, "eos": 1, "colours": {str(c): c + 2 for c in range(ARC_COLOURS)}}
    raise TrmError(f"the demo page shows {', '.join(TASKS)} puzzles; the model's task is {task!r}")
