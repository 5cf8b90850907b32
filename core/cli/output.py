"""Printing helpers shared by commands: info lines to stderr, JSON documents to stdout."""

from __future__ import annotations

import json
import sys
from typing import Any


def info(message: str) -> None:
    """A status line for the user (stderr, so stdout stays clean for --json)."""
    print(f"trm: {message}", file=sys.stderr, flush=True)


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout."""
    print(json.dumps(document, indent=2, default=str))
