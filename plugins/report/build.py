"""``trm report``'s work: read the runs, draw the plots, write plots.json, report.json and
index.html into one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attrs import frozen

from trm.errors import TrmError
from trm.plugins.report.html import render_index
from trm.plugins.report.plots import plot_specs, render
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
        manifest = [render(plot, out_dir) for plot in plot_specs(runs)]
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
