"""The report's exploration plot: exact accuracy against the trajectories explored per puzzle,
one line per selection rule and the oracle dotted, from an evaluation's ``explore@N/RULE``
figures (:mod:`trm.evaluation.explore`).

Two things carry those figures: a run's evaluations with ``train.eval_explore = N`` (its last
explored one is drawn beside the run's other plots), and the document ``trm eval --explore N
--json`` prints, saved to a file (``trm report FILE`` draws it alone: one panel per puzzle kind
of a shipped model's evaluation, one panel otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trm.data.selection import CURVE_PREFIX, ORACLE
from trm.errors import TrmError
from trm.plugins.report.plots import Panel, PlotSpec, Trace
from trm.plugins.report.runs import Run

PLOT_FILE = "exploration.png"
TITLE = "Exact accuracy against trajectories per puzzle"
XLABEL = "trajectories per puzzle (N, log scale)"


def has_curve(figures: dict[str, Any]) -> bool:
    """True when ``figures`` hold an exploration's per-N figures."""
    return any(str(key).startswith(CURVE_PREFIX) for key in figures)


def curve_traces(figures: dict[str, Any], run: str, prefix: str = "") -> list[Trace]:
    """A trace per selection rule (the oracle last, dotted) of the ``explore@N/RULE``
    figures in ``figures``, labelled ``prefix + rule``."""
    points: dict[str, list[tuple[float, float]]] = {}
    for key, value in figures.items():
        if not str(key).startswith(CURVE_PREFIX) or not isinstance(value, (int, float)):
            continue
        size, _, rule = str(key)[len(CURVE_PREFIX) :].partition("/")
        if size.isdigit() and rule:
            points.setdefault(rule, []).append((float(size), float(value)))
    rules = [*sorted(set(points) - {ORACLE}), *([ORACLE] if ORACLE in points else [])]
    traces = []
    for rule in rules:
        xs, ys = zip(*sorted(points[rule]), strict=True)
        style = "limit" if rule == ORACLE else "eval"
        traces.append(Trace(f"{prefix}{rule}", run, list(xs), list(ys), style))
    return traces


def exploration_plot(runs: list[Run]) -> PlotSpec | None:
    """The runs' last explored evaluations in one panel (None when no run explored)."""
    several = len(runs) > 1
    traces: list[Trace] = []
    steps = []
    for run in runs:
        explored = [row for row in run.evals if has_curve(row)]
        if explored:
            last = explored[-1]
            steps.append(f"{run.label} step {last['step']}" if several else f"step {last['step']}")
            traces += curve_traces(last, run.label, f"{run.label}: " if several else "")
    if not traces:
        return None
    panel = Panel(f"last explored evaluation ({', '.join(steps)})", "share of puzzles", traces)
    return PlotSpec(PLOT_FILE, TITLE, XLABEL, [panel], log_x=True)


def evaluation_panels(path: Path) -> tuple[dict[str, Any], list[Panel]]:
    """The ``trm eval --json`` document in ``path`` and a panel per figure set with a curve
    (each kind of a shipped model's evaluation, else the document itself); TrmError naming
    what is wrong for a file that is not such a document or holds no exploration."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrmError(f"cannot read {path} ({exc.strerror or exc})") from None
    except (ValueError, RecursionError):
        raise TrmError(
            f"{path} is not JSON; give a run directory or a file of `trm eval --json`"
        ) from None
    if not isinstance(document, dict) or "explore" not in document:
        raise TrmError(
            f"{path} is not a document of `trm eval --json`; give a run directory or one"
        )
    kinds = document.get("kinds")
    sets = (
        [(str(k.get("kind", "")), k) for k in kinds if isinstance(k, dict)]
        if isinstance(kinds, list)
        else [(str(document.get("split") or document.get("checkpoint") or path.name), document)]
    )
    panels = [
        Panel(name, "share of puzzles", curve_traces(figures, path.name))
        for name, figures in sets
        if has_curve(figures)
    ]
    if not panels:
        raise TrmError(
            f"{path} holds no exploration figures; evaluate with `trm eval ... --explore N "
            "--json` (N of 2 or more) to draw accuracy against trajectories"
        )
    return document, panels
