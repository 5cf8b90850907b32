"""Printing helpers shared by commands: info lines to stderr, JSON documents to stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

_rank = [0]  # this process's rank under torchrun (set_rank); 0 alone


def set_rank(rank: int) -> None:
    """Under torchrun: the other ranks than 0 show only warnings, prefixed with their rank
    (rank 0 speaks for the run; every rank takes the same steps)."""
    _rank[0] = rank


def rank() -> int:
    """This process's rank as :func:`set_rank` last set it (0 alone)."""
    return _rank[0]


def error(message: str) -> None:
    """The one ``trm: error: …`` line, written whole in one write so that the lines of
    several processes sharing stderr (torchrun's ranks) never run together; a rank other
    than 0 tags it with its rank."""
    tag = f"[rank {_rank[0]}] " if _rank[0] > 0 else ""
    sys.stderr.write(f"trm: error: {tag}{message}\n")
    sys.stderr.flush()


def info(message: str) -> None:
    """A status line for the user (stderr, so stdout stays clean for --json).

    On a terminal it first clears the line a live display (the progress plugin) may have
    left without a newline, so the two never run together."""
    if _rank[0] > 0:
        if message.startswith("warning"):
            print(f"trm[rank {_rank[0]}]: {message}", file=sys.stderr, flush=True)
        return
    if sys.stdout.isatty():
        sys.stdout.write("\r\033[K")
        sys.stdout.flush()
    print(f"trm: {message}", file=sys.stderr, flush=True)


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    print(json.dumps(document, indent=2, default=str))
