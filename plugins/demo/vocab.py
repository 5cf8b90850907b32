"""How a task's cells map to the model's tokens, for the page in JavaScript.

The page (page/codec.js) encodes a puzzle a person typed or drew and decodes the model's
answers with the card's ``grid`` and ``vocab`` alone. For Sudoku and mazes they are the data
source's ``cell_encoding`` (the ONNX solver card's, ``trm-onnx.json``, holds the same); the
``arc`` source describes none, so the served page's ARC encoding is written here: a canvas of
side ``rows``, ``{"pad": 0, "eos": 1, "colours": {"0": 2, ..., "9": 11}}`` (the arc source's
tokens; tests/test_demo.py checks them against its ``parse_puzzle``).
"""

from __future__ import annotations

import math
from typing import Any

from trm.errors import TrmError

# The tasks the page can show.
TASKS = ("sudoku", "maze", "arc")
ARC_COLOURS = 10


def page_encoding(source: Any, seq_len: int) -> dict[str, Any]:
    """``{"grid": ..., "vocab": ...}`` of ``source``'s puzzles of ``seq_len`` tokens; TrmError
    for a task the page cannot show."""
    if source.name not in TASKS:
        raise TrmError(
            f"the demo page shows {', '.join(TASKS)} puzzles; the model's task is {source.name!r}"
        )
    encoding = getattr(source, "cell_encoding", None)
    if callable(encoding):
        described = encoding(seq_len)
        return {"grid": described["grid"], "vocab": described["vocab"]}
    side = math.isqrt(seq_len)
    return {
        "grid": {"rows": side, "cols": side},
        "vocab": {"pad": 0, "eos": 1, "colours": {str(c): c + 2 for c in range(ARC_COLOURS)}},
    }
