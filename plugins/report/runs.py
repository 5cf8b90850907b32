"""Reading a run directory as ``trm run`` left it: metrics.jsonl, summary.json, spec.toml,
estimate.json and hardware.json. Every file but metrics.jsonl may be missing (a run still in
progress, one written by an older trm); a line cut short by a kill is skipped."""

from __future__ import annotations

import json
import sys
from bisect import bisect_right
from pathlib import Path
from typing import Any

from attrs import frozen

from trm.errors import TrmError
from trm.metrics_log import read_metrics

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

METRICS_FILE = "metrics.jsonl"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def _read_toml(path: Path) -> dict[str, Any] | None:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"arch": {"hidden_size": 64}}`` -> ``{"arch.hidden_size": 64}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


@frozen
class Run:
    """One run directory, read. ``label`` names it in legends and tables; ``train``,
    ``evals`` and ``events`` are its metrics rows by kind (one training row per step, in
    step order); each training row has ``wall_s`` (the run's training time at the end of that
    step; estimated from ``samples_per_s`` for runs whose rows lack it)."""

    path: Path
    label: str
    train: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    events: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    summary: dict[str, Any] | None
    spec: dict[str, Any] | None
    estimate: dict[str, Any] | None
    hardware: dict[str, Any] | None

    def wall_s_at(self, step: int) -> float | None:
        """The training wall time at the end of ``step`` (the nearest earlier training
        row's), None before the first."""
        index = bisect_right(self.train, step, key=lambda row: row["step"])
        return self.train[index - 1]["wall_s"] if index else None


def _with_wall_time(train: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the rows, each with ``wall_s``; missing ones estimated from the steps'
    speed (global batch / samples_per_s) added to the previous row's."""
    out = []
    wall_s, previous_samples = 0.0, 0
    for row in train:
        row = dict(row)
        if isinstance(row.get("wall_s"), (int, float)):
            wall_s = float(row["wall_s"])
        else:
            samples = row.get("samples") or previous_samples
            rate = row.get("samples_per_s") or 0
            wall_s += (samples - previous_samples) / rate if rate > 0 else 0.0
            row["wall_s"] = round(wall_s, 3)
        previous_samples = row.get("samples") or previous_samples
        out.append(row)
    return out


def load_run(path: Path, label: str | None = None) -> Run:
    """Read the run in ``path``; TrmError when it holds no metrics.jsonl."""
    if not path.is_dir():
        raise TrmError(f"{path} is not a directory; give a run directory (trm run ... --out DIR)")
    rows = read_metrics(path / METRICS_FILE)
    by_step: dict[int, dict[str, Any]] = {}
    evals, events = [], []
    for row in rows:
        kind = row.get("kind")
        if kind is None:
            by_step[row["step"]] = row
        elif kind == "eval":
            evals.append(row)
        elif kind == "event":
            events.append(row)
    imported = any(event.get("event") == "imported" for event in events)  # trm import
    if not by_step and not imported:  # no file, an empty one, or only events (stopped early)
        raise TrmError(
            f"{path} holds no training rows in {METRICS_FILE}; give a directory that "
            "trm run has trained into (its --out)"
        )
    train = _with_wall_time([by_step[step] for step in sorted(by_step)])
    return Run(
        path=path,
        label=label or path.resolve().name,
        train=train,
        evals=sorted(evals, key=lambda r: r["step"]),
        events=sorted(events, key=lambda r: r["step"]),
        rows=rows,
        summary=_read_json(path / "summary.json"),
        spec=_read_toml(path / "spec.toml"),
        estimate=_read_json(path / "estimate.json"),
        hardware=_read_json(path / "hardware.json"),
    )


def load_runs(paths: list[Path]) -> list[Run]:
    """Read every run; two runs with the same folder name are labelled with their parent
    folder too (``a/run``, ``b/run``)."""
    names = [p.resolve().name for p in paths]
    runs = []
    for path, name in zip(paths, names, strict=True):
        label = name
        if names.count(name) > 1:
            label = f"{path.resolve().parent.name}/{name}"
        runs.append(load_run(path, label))
    labels = [run.label for run in runs]
    if len(set(labels)) < len(labels):
        raise TrmError(f"the same run is given twice ({', '.join(labels)}); give each once")
    return runs


def spec_differences(runs: list[Run]) -> list[tuple[str, list[Any]]]:
    """The spec keys whose values differ between the runs: ``(key, value per run)``, a run
    without the key (or without spec.toml) giving None. Empty for one run."""
    if len(runs) < 2:
        return []
    flats = [flatten(run.spec or {}) for run in runs]
    keys = sorted(set().union(*flats))
    out = []
    for key in keys:
        values = [flat.get(key) for flat in flats]
        if any(value != values[0] for value in values[1:]):
            out.append((key, values))
    return out
