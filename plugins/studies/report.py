"""``trm report DIR`` on a study's folder: the trials' table, the objective against each swept
parameter, the parameters' importances (Optuna's), and the best trial's own run report —
the same page, plots and report.json as a run's report (core/report/).

Writes into ``out_dir``: ``objective-PARAM.png`` per parameter, ``importances.png`` (when two
or more trials finished), ``best/`` (the best trial's run report), report.json and
index.html. matplotlib loads here.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from trm.errors import TrmError
from trm.plugins.report.build import REPORT_FILE, Report, make_report
from trm.plugins.report.html import STYLE
from trm.plugins.studies.results import StudyResult, TrialRow
from trm.plugins.studies.runner import load_study

DPI = 100
_STATE_COLORS = {"complete": "#1f77b4", "pruned": "#ff7f0e", "fail": "#d62728"}


def make_study_report(study_dir: Path, out_dir: Path) -> Report:
    """The study report of ``study_dir`` into ``out_dir`` (created); TrmError when the folder
    holds no study or ``out_dir`` cannot be written."""
    result, importances = load_study(study_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        pngs = [_objective_plot(result, key, out_dir) for key in _swept_keys(result)]
        if importances:
            pngs.append(_importance_plot(importances, out_dir))
        best_report = None
        if result.best is not None and result.best.run_dir and Path(result.best.run_dir).is_dir():
            best_report = make_report([Path(result.best.run_dir)], out_dir / "best")
        document = {
            **result.document(),
            "importances": importances,
            "plots": pngs,
            "study_dir": str(study_dir),
            "best_report": str(best_report.out_dir) if best_report else None,
            "out_dir": str(out_dir),
        }
        (out_dir / REPORT_FILE).write_text(json.dumps(document, indent=2, default=str) + "\n")
        (out_dir / "index.html").write_text(
            _page(result, importances, pngs, best_report), encoding="utf-8"
        )
    except OSError as exc:
        raise TrmError(f"cannot write the report into {out_dir} ({exc}); choose --out") from exc
    return Report(out_dir, pngs, document)


def _swept_keys(result: StudyResult) -> list[str]:
    return sorted({key for row in result.trials for key in row.params})


def _objective_plot(result: StudyResult, key: str, out_dir: Path) -> str:
    """The objective of each finished trial against ``key``; a pruned or failed trial is a
    cross at the last evaluation value its pruner saw."""
    figure = Figure(figsize=(6.0, 3.6), dpi=DPI)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    complete = [row for row in result.trials if row.value is not None and key in row.params]
    others = [row for row in result.trials if row.value is None and key in row.params]
    categorical = any(
        not isinstance(row.params[key], (int, float)) for row in result.trials if key in row.params
    )
    labels = sorted({str(row.params[key]) for row in result.trials if key in row.params})

    def x_of(row: TrialRow) -> Any:
        return labels.index(str(row.params[key])) if categorical else row.params[key]

    ax.plot(
        [x_of(row) for row in complete],
        [row.value for row in complete],
        "o",
        color=_STATE_COLORS["complete"],
        label="complete",
    )
    for state in ("pruned", "fail"):
        rows = [row for row in others if row.state == state and row.last_reported]
        if rows:
            ax.plot(
                [x_of(r) for r in rows],
                [r.last_reported[1] for r in rows],
                "x",
                color=_STATE_COLORS[state],
                label=f"{state} (its last evaluation)",
            )
    if categorical:
        ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel(key)
    ax.set_ylabel(result.metric)
    ax.set_title(f"{result.metric} against {key}", fontsize=10, loc="left")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    figure.tight_layout()
    name = f"objective-{key.replace('.', '-')}.png"
    figure.savefig(out_dir / name, dpi=DPI)
    return name


def _importance_plot(importances: dict[str, float], out_dir: Path) -> str:
    figure = Figure(figsize=(6.0, 0.8 + 0.5 * len(importances)), dpi=DPI)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    keys = list(importances)[::-1]
    ax.barh(keys, [importances[k] for k in keys], color="#1f77b4")
    ax.set_xlabel("importance (Optuna's PED-ANOVA)")
    ax.set_title("parameter importances", fontsize=10, loc="left")
    figure.tight_layout()
    figure.savefig(out_dir / "importances.png", dpi=DPI)
    return "importances.png"


def _page(
    result: StudyResult, importances: dict[str, float], pngs: list[str], best: Report | None
) -> str:
    keys = _swept_keys(result)
    header = ["trial", "state", result.metric, *keys, "wall time s", "error"]
    rows = []
    for row in result.trials:
        cells = [
            str(row.number),
            row.state,
            "" if row.value is None else f"{row.value:.4g}",
            *(escape(str(row.params.get(k, ""))) for k in keys),
            "" if row.wall_s is None else f"{row.wall_s:.0f}",
            escape(row.error or ""),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    table = (
        "<table><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in header)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )
    best_line = "<p>No trial finished yet.</p>"
    if result.best is not None:
        best_line = (
            f"<p>Best: trial {result.best.number}, {escape(result.metric)} = "
            f"{result.best.value:.6g}. Train it again with "
            f"<code>{escape(result.best.command or '')} --out DIR</code>."
        )
        if best is not None:
            best_line += ' Its run report: <a href="best/index.html">best/index.html</a>.'
        best_line += "</p>"
    ranked = ", ".join(f"{escape(k)} {v:.2f}" for k, v in importances.items())
    if ranked:
        best_line += f"<p>Parameter importances (Optuna's PED-ANOVA): {ranked}</p>"
    figures = "".join(
        f'<figure><img src="{escape(name)}" alt="{escape(name)}"></figure>' for name in pngs
    )
    counts = ", ".join(f"{n} {state}" for state, n in result.counts().items())
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>study {escape(result.name)}</title><style>{STYLE}</style></head><body>"
        f"<h1>Study {escape(result.name)}</h1>"
        f"<p>{escape(result.direction)} {escape(result.metric)}; trials: {escape(counts)}</p>"
        f"{best_line}{table}{figures}</body></html>\n"
    )
