"""metrics.jsonl: one JSON object a line, continued on resume without gaps or repeats.

Rows carry ``step``. Training rows have no ``kind``; evaluations have ``"kind": "eval"``;
events (micro-batch changes, out-of-memory recoveries, pauses, thermal changes, checkpoint
failures) have ``"kind": "event"`` and an ``event`` name. A resumed run first drops every row
of a step after the checkpoint it resumes from (and a line cut short by a kill), so the file
reads as if the run had never stopped. :class:`Journal` writes rows and tells the user;
:func:`read_metrics` reads them back (the loop's detectors, the report).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trm.control import TrainControl
from trm.errors import TrmError


class MetricsLog:
    """Appends rows to ``path``; use as a context manager after :meth:`continue_from`.

    ``path`` None keeps nothing: the log of a data-parallel rank other than 0, whose rows
    rank 0 writes (the ranks agree on every row's values).

    A row that cannot be written (disk full) is kept in memory and written with the next row
    that can be; ``on_error`` hears of the first failure of a streak. :meth:`sync` raises
    OSError while rows are still held back, so the checkpoint that calls it counts as failed.
    """

    def __init__(
        self, path: Path | None, on_error: Callable[[OSError], None] | None = None
    ) -> None:
        self.path = path
        self.on_error = on_error
        self.error: OSError | None = None
        self._fd: int | None = None
        self._pending = bytearray()

    def continue_from(self, step: int) -> None:
        """Keep only complete rows with ``step`` <= ``step`` (atomically rewritten)."""
        if self.path is None or not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill mid-write
            if isinstance(row, dict) and row.get("step", 0) <= step:
                kept.append(line)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        os.replace(tmp, self.path)

    @property
    def is_open(self) -> bool:
        """Whether rows can be written now (inside the context)."""
        return self._fd is not None

    def __enter__(self) -> MetricsLog:
        if self.path is None:
            self._fd = os.open(os.devnull, os.O_WRONLY)
            return self
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            self._drain()
            os.close(self._fd)
            self._fd = None

    def write(self, row: dict[str, Any]) -> None:
        """Append one row and hand it to the OS (it survives a kill of the process)."""
        if self._fd is None:
            raise RuntimeError("MetricsLog.write outside its context")
        self._pending += (json.dumps(row) + "\n").encode()
        self._drain()

    def _drain(self) -> None:
        while self._pending and self._fd is not None:
            try:
                written = os.write(self._fd, self._pending)
            except OSError as exc:
                if self.error is None and self.on_error is not None:
                    self.on_error(exc)
                self.error = exc
                return
            del self._pending[:written]
        self.error = None

    def sync(self) -> None:
        """Force written rows to disk (called before each checkpoint); OSError while rows
        are held back or the disk refuses."""
        if self.path is None:
            return
        self._drain()
        if self._pending:
            raise OSError(f"metrics.jsonl cannot be written ({self.error})")
        if self._fd is not None:
            os.fsync(self._fd)


class Journal:
    """What a run tells: rows to metrics.jsonl and lines to the user (``log``).

    Every part of the loop records through one Journal, so an event is written the same way
    wherever it happens.
    """

    def __init__(self, metrics: MetricsLog, log: Callable[[str], None]) -> None:
        self.metrics = metrics
        self.log = log
        metrics.on_error = self._metrics_failed

    def _metrics_failed(self, error: OSError) -> None:
        self.log(
            f"warning: metrics.jsonl cannot be written ({error}); its rows are kept in memory "
            "and written when the disk has room"
        )

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


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl file in file order ([] when it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        what = "is a folder" if path.is_dir() else f"cannot be read ({exc.strerror or exc})"
        raise TrmError(
            f"{path} {what}; it must be the metrics file trm run writes (give its run "
            "directory, or move the file back)"
        ) from None
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows


def per_task_figures(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A mix's evaluation result by task: ``{TASK: {"exact_accuracy": …, …}}`` from its
    ``NAME/TASK`` figures (empty for a run of one dataset)."""
    tasks: dict[str, dict[str, Any]] = {}
    for key, value in result.items():
        name, slash, task = key.partition("/")
        if slash:
            tasks.setdefault(task, {})[name] = value
    return tasks
