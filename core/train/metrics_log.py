"""metrics.jsonl: one JSON object a line, continued on resume without gaps or repeats.

Rows carry ``step``. Training rows have no ``kind``; evaluations have ``"kind": "eval"``;
events (micro-batch changes, out-of-memory recoveries, pauses, thermal changes, checkpoint
failures) have ``"kind": "event"`` and an ``event`` name. A resumed run first drops every row
of a step after the checkpoint it resumes from (and a line cut short by a kill), so the file
reads as if the run had never stopped. :class:`Journal` writes rows and tells the user.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from trm.control import TrainControl


class MetricsLog:
    """Appends rows to ``path``; use as a context manager after :meth:`continue_from`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def continue_from(self, step: int) -> None:
        """Keep only complete rows with ``step`` <= ``step`` (atomically rewritten)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write
            if isinstance(row, dict) and row.get("step", 0) <= step:
                kept.append(line)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.path)

    def __enter__(self) -> MetricsLog:
        self._file = self.path.open("a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, row: dict[str, Any]) -> None:
        """Append one row and hand it to the OS (it survives a kill of the process)."""
        if self._file is None:
            raise RuntimeError("MetricsLog.write outside its context")
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def sync(self) -> None:
        """Force written rows to disk (called before each checkpoint)."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())


class Journal:
    """What a run tells: rows to metrics.jsonl and lines to the user (``log``).

    Every part of the loop records through one Journal, so an event is written the same way
    wherever it happens.
    """

    def __init__(self, metrics: MetricsLog, log: Callable[[str], None]) -> None:
        self.metrics = metrics
        self.log = log

    def event(self, step: int, event: str, quiet: bool = False, **fields: Any) -> None:
        """Record an event row in metrics.jsonl (and show it unless ``quiet``)."""
        self.metrics.write({"kind": "event", "step": step, "event": event, **fields})
        if not quiet:
            details = ", ".join(f"{k}={v}" for k, v in fields.items())
            self.log(f"step {step}: {event.replace('_', ' ')} ({details})")

    def show(self, control: TrainControl) -> None:
        """Show the messages plugins logged through ``control`` since the last call."""
        for message in control.take_messages():
            self.log(message)
