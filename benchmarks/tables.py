"""Plain-text and markdown tables for the benchmark scripts (which run as
``python benchmarks/NAME.py``, so this module is importable as ``tables``), and the saved
documents their ``--from-json`` reads."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trm.errors import TrmError


def print_rows(
    headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False
) -> None:
    """Right-aligned columns separated by two spaces, or markdown table rows."""
    if markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def print_record(report: Mapping[str, Any], columns: Sequence[str]) -> None:
    """One report's ``columns`` as a one-row table headed by the keys."""
    print_rows(columns, [[str(report[c]) for c in columns]])


def read_document(path: Path) -> dict[str, Any]:
    """The saved JSON document at ``path`` (``--from-json``); TrmError naming the file when it
    cannot be read or is not a JSON object."""
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TrmError(f"--from-json {path}: cannot read it ({exc})") from None
    if not isinstance(document, dict):
        raise TrmError(f"--from-json {path}: not a JSON object")
    return document


def print_saved(
    path: Path,
    headers: Sequence[str],
    table_rows: Callable[[dict[str, Any]], list[list[str]]],
    markdown: bool = False,
) -> int:
    """``--from-json PATH``: print the table ``table_rows`` makes of the saved document; the
    exit code (2 with one ``trm: error:`` line when the file cannot be read)."""
    try:
        document = read_document(path)
    except TrmError as exc:
        print(f"trm: error: {exc}", file=sys.stderr)
        return 2
    print_rows(headers, table_rows(document), markdown=markdown)
    return 0
