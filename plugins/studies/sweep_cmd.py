"""``trm sweep STUDY.toml [--workers N] [--out DIR] [--storage URL] [--json]``: a study of
many runs on Optuna (docs/sweeps.md). Prints the trials' table (``--json``: the study's
document alone on stdout, the trials' progress on stderr); exit 130 when a signal stopped it
(run it again to resume)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from trm.cli.output import info, print_json

EXIT_OK, EXIT_STOPPED = 0, 130


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "sweep", parents=[common], help="a study: many runs of one spec, on Optuna"
    )
    parser.add_argument("study", type=Path, metavar="STUDY", help="the study file (TOML)")
    parser.add_argument(
        "--workers", type=_workers, default=1, help="trials at once on this machine (default 1)"
    )
    parser.add_argument(
        "--out", type=_folder, help="the study's folder (default runs/<study name>)"
    )
    parser.add_argument(
        "--storage",
        help="an Optuna database URL shared by workers on several machines "
        "(default sqlite:///OUT/study.db)",
    )
    parser.add_argument("--worker-of", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the study as one JSON document")
    parser.set_defaults(func=run)


def _workers(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 256:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 256, got {text!r}")
    return int(text)


def _folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a folder for the study")
    return Path(text)


def run(args: argparse.Namespace) -> int:
    from trm.plugins.studies.runner import StudyStopped
    from trm.plugins.studies.sweep import _storage, sweep_study

    try:
        # --json: stdout carries the document alone; the trials' progress goes to stderr
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            result = sweep_study(
                args.study,
                args.out,
                args.workers,
                _storage(args.storage),
                info,
                worker_of=args.worker_of,
                plugins=tuple(args.plugins),
            )
    except StudyStopped as stopped:
        info(str(stopped))
        return EXIT_STOPPED
    if args.worker_of is not None:  # a worker of a parent trm sweep: the parent prints
        return EXIT_OK
    if args.json:
        print_json(result.document())
        return EXIT_OK
    print(result.table())
    if result.best is not None:
        info(f"best: trial {result.best.number}, {result.metric} = {result.best.value:.6g}")
        info(f"train it again with: {result.best.command}")
    info(f"trials: {result.counts()}; the study is in {result.out_dir}")
    return EXIT_OK
