"""Where the API's status lines go: ``trm: …`` on stderr, as the CLI shows them."""

from __future__ import annotations

import sys
from collections.abc import Callable

Log = Callable[[str], None]


def say(message: str) -> None:
    """A status line for the user of ``trm.train``/``trm.load``/``trm.estimate``: the line
    ``trm run`` shows, on stderr (a notebook shows it under the cell)."""
    print(f"trm: {message}", file=sys.stderr, flush=True)


def quiet(message: str) -> None:
    """A log that shows nothing (for :func:`trm.estimate`, whose result is its report)."""
