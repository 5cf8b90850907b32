"""Reading the rows a run appends to its metrics.jsonl, as it appends them.

The loggers (``tensorboard``, ``wandb``) mirror metrics.jsonl rather than the hooks'
arguments, so every row the core writes — training rows, evaluations and every kind of
event — reaches them in the same form as in the file. Not a plugin itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trm.state import TrainState


class MetricsTail:
    """The complete rows appended to ``path`` since :meth:`start` (a line still being
    written is left for the next call)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def start(self) -> None:
        """Skip what the file holds now (the rows of earlier processes of a resumed run)."""
        try:
            self.offset = self.path.stat().st_size
        except FileNotFoundError:
            self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        """The rows completed since the last call."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        rows = []
        for line in data[: end + 1].splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
        return rows


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """A row as named numbers: ``train/loss``, ``eval/exact_accuracy``, ``events/pause``
    (1 at the event's step) and ``events/pause/seconds``; strings and None are left out."""
    kind = row.get("kind")
    if kind == "event":
        name = str(row.get("event", "event"))
        prefix = f"events/{name}"
        out = {prefix: 1.0}
    else:
        prefix = "eval" if kind == "eval" else "train"
        out = {}
    for key, value in row.items():
        if key in ("kind", "step", "event") or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[f"{prefix}/{key}"] = float(value)
    return out


def read_hardware(state: TrainState) -> dict[str, Any]:
    """The run's hardware.json (written before ``on_train_start``); {} when unreadable."""
    try:
        data = json.loads((state.run_dir / "hardware.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_main_process() -> bool:
    """False on every process but rank 0 under torchrun (only rank 0 writes the run)."""
    return os.environ.get("RANK", "0") in ("", "0")
