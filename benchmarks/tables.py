"""Plain-text and markdown tables for the benchmark scripts (which run as
``python benchmarks/NAME.py``, so this module is importable as ``tables``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


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
