"""``trm report``'s work: read the runs, draw the plots, write plots.json, report.json and
index.html into one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attrs import frozen

from trm.errors import TrmError
from trm.plugins.report.exploration import (
    PLOT_FILE,
    TITLE,
    XLABEL,
    evaluation_panels,
    exploration_plot,
)
from trm.plugins.report.html import render_evaluation_index, render_index
from trm.plugins.report.plots import PlotSpec, plot_specs, render
from trm.plugins.report.runs import load_runs, spec_differences
from trm.plugins.report.summary import run_summary

# The summary document every report folder holds: its presence marks a folder as a report.
REPORT_FILE = "report.json"


@frozen
class Report:
    """What :func:`make_report` wrote: the folder, the PNG names, and the summary document
    (also report.json; ``trm report --json`` prints it)."""

    out_dir: Path
    pngs: list[str]
    document: dict[str, Any]


def check_report_folder(out_dir: Path) -> bool:
    """TrmError unless ``out_dir`` is new, empty, or a report this command wrote before
    (it holds report.json), which is then replaced; returns whether one is replaced.

    A folder of the user's (its index.html, say) is never overwritten."""
    if not out_dir.exists():
        return False
    if not out_dir.is_dir():
        raise TrmError(f"--out {out_dir} is a file; give a folder for the report")
    try:
        held = sorted(entry.name for entry in out_dir.iterdir())
    except OSError as exc:
        raise TrmError(f"--out {out_dir} cannot be read ({exc.strerror or exc})") from None
    if not held:
        return False
    if REPORT_FILE in held:
        return True
    shown = ", ".join(held[:3]) + (", …" if len(held) > 3 else "")
    raise TrmError(
        f"--out {out_dir} holds files trm report did not write ({shown}); give a new or "
        "empty folder, or a previous report's"
    )


def make_report(run_dirs: list[Path], out_dir: Path) -> Report:
    """Report on ``run_dirs`` (overlaid when several) into ``out_dir`` (created).

    Writes one PNG per plot the runs have data for, plots.json (per plot, every line drawn:
    label, run, colour, number of points), report.json (the summary table, the findings and
    the spec keys that differ) and index.html. TrmError for a folder that holds no run or an
    ``out_dir`` that cannot be written.
    """
    runs = load_runs(run_dirs)
    check_report_folder(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrmError(f"cannot create the report folder {out_dir} ({exc}); choose --out") from exc
    summaries = [run_summary(run) for run in runs]
    differences = spec_differences(runs)
    try:
        explored = exploration_plot(runs)
        plots = [*plot_specs(runs), *([explored] if explored else [])]
        manifest = [render(plot, out_dir) for plot in plots]
        document = {
            "runs": summaries,
            "spec_differences": [{"key": k, "values": v} for k, v in differences],
            "plots": [entry["file"] for entry in manifest],
            "out_dir": str(out_dir),
        }
        (out_dir / "plots.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (out_dir / REPORT_FILE).write_text(json.dumps(document, indent=2, default=str) + "\n")
        page = render_index(summaries, differences, manifest)
        (out_dir / "index.html").write_text(page, encoding="utf-8")
    except OSError as exc:
        raise TrmError(f"cannot write the report into {out_dir} ({exc}); choose --out") from exc
    return Report(out_dir, [entry["file"] for entry in manifest], document)


def make_evaluation_report(path: Path, out_dir: Path) -> Report:
    """Report on the ``trm eval --explore N --json`` document in ``path`` into ``out_dir``:
    exploration.png (:mod:`trm.plugins.report.exploration`), plots.json, report.json (the
    evaluation's document and the plot) and index.html. TrmError for a file that is not
    such a document, or an ``out_dir`` that cannot be written (checked first, as for runs)."""
    evaluation, panels = evaluation_panels(path)
    check_report_folder(out_dir)
    plot = PlotSpec(PLOT_FILE, TITLE, XLABEL, panels, log_x=True)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        manifest = [render(plot, out_dir)]
        document = {"evaluation": evaluation, "plots": [PLOT_FILE], "out_dir": str(out_dir)}
        (out_dir / "plots.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (out_dir / REPORT_FILE).write_text(json.dumps(document, indent=2, default=str) + "\n")
        page = render_evaluation_index(path.name, evaluation, manifest)
        (out_dir / "index.html").write_text(page, encoding="utf-8")
    except OSError as exc:
        raise TrmError(f"cannot write the report into {out_dir} ({exc}); choose --out") from exc
    return Report(out_dir, [PLOT_FILE], document)
