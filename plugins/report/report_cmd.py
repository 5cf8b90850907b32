"""``trm report RUN_DIR [RUN_DIR ...]``: plots, index.html and a summary table of what the
runs did, with the leak and slowdown checks; several runs overlay in the same plots.
``trm report EVAL.json``: a saved ``trm eval --explore N --json`` document drawn as accuracy
against trajectories (:mod:`trm.plugins.report.exploration`).

The report goes to ``--out`` (default: ``RUN_DIR/report`` for one run, ``./report`` for
several). ``--json`` prints the summary document (report.json) to stdout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trm.cli.output import info, print_json

# the file that makes a folder a study (trm sweep), reported as one
STUDY_DB = "study.db"


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "report", parents=[common], help="plots, a page and a summary of one or more runs"
    )
    parser.add_argument(
        "run_dirs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="run directory, study folder, or a file of `trm eval --explore N --json`",
    )
    parser.add_argument(
        "--out",
        type=_folder,
        help="folder for the report (default RUN_DIR/report for one run, ./report for several)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the summary as one JSON document"
    )
    parser.set_defaults(func=run)


def _study_report(study_dir: Path, out_dir: Path, as_json: bool, plugins: list[str]) -> int:
    """``trm report DIR`` on a study's folder (``trm sweep``): its page and report.json, drawn
    by the ``studies`` plugin (its ``api_functions``' ``"study_report"``)."""
    from trm.plugin_manager import load_plugins

    make_study_report = load_plugins(plugins).api_function("study_report")  # Optuna loads here

    report = make_study_report(study_dir, out_dir)
    info(f"wrote {len(report.pngs)} plots and index.html to {report.out_dir}")
    if as_json:
        print_json(report.document)
    return 0


def _folder(text: str) -> Path:
    """An argparse type: a folder path, never empty (an empty one would mean the current
    folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a folder for the report")
    return Path(text)


def run(args: argparse.Namespace) -> int:
    from trm.plugins.report.build import (  # matplotlib loads here
        check_report_folder,
        make_evaluation_report,
        make_report,
    )

    single = args.run_dirs[0] if len(args.run_dirs) == 1 else None
    evaluation = single is not None and single.is_file()  # a saved `trm eval --json` document
    if args.out is not None:
        out_dir = args.out
    elif single is None:
        out_dir = Path("report")
    else:
        out_dir = single.with_name(f"{single.stem}-report") if evaluation else single / "report"
    if check_report_folder(out_dir):
        info(f"replacing the report in {out_dir}")
    if evaluation:
        report = make_evaluation_report(single, out_dir)
        info(f"wrote {len(report.pngs)} plot and index.html to {report.out_dir}")
        if args.json:
            print_json(report.document)
        return 0
    if single is not None and (single / STUDY_DB).exists():
        return _study_report(args.run_dirs[0], out_dir, args.json, args.plugins)
    report = make_report(args.run_dirs, out_dir)
    for summary in report.document["runs"]:
        for task, figures in summary.get("tasks", {}).items():
            info(
                f"{summary['run']}: {task}: final exact accuracy "
                f"{figures.get('exact_accuracy', 0):.2%}, cell accuracy "
                f"{figures.get('cell_accuracy', 0):.2%}"
            )
        for switch in summary["activation_checkpointing_switches"]:
            info(
                f"{summary['run']}: activation checkpointing {'on' if switch['on'] else 'off'} "
                f"from step {switch['step']}: {switch['reason']}"
            )
        for finding in summary["findings"]:
            info(
                f"{summary['run']}: {finding['kind']} from step {finding['step']}: "
                f"{finding['message']}; {finding['suggestion']}"
            )
    differences = report.document["spec_differences"]
    if differences:
        info(f"spec keys that differ: {', '.join(d['key'] for d in differences)}")
    info(f"wrote {len(report.pngs)} plots and index.html to {report.out_dir}")
    if args.json:
        print_json(report.document)
    return 0
