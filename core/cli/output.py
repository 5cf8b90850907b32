"""Printing helpers shared by commands: info lines to stderr, JSON documents to stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


def info(message: str) -> None:
    """A status line for the user (stderr, so stdout stays clean for --json).

    On a terminal it first clears the line a live display (the progress plugin) may have
    left without a newline, so the two never run together."""
    if sys.stdout.isatty():
        sys.stdout.write("\r\033[K")
        sys.stdout.flush()
    print(f"trm: {message}", file=sys.stderr, flush=True)


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    print(json.dumps(document, indent=2, default=str))
