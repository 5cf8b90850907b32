"""``trm data build SOURCE --out DIR [options]``: build a puzzle-dataset directory.

The options after SOURCE come from the source's ``options_type``: each attrs field becomes
``--field-name`` with its type and default, so a third-party source gets a CLI for free.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import attrs

from trm.cli.common import OneLineParser
from trm.cli.output import info
from trm.errors import TrmError
from trm.plan.dataset import build_options, find_data_source
from trm.plugin_manager import load_plugins


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("data", parents=[common], help="build datasets")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    actions.required = True
    build = actions.add_parser(
        "build", parents=[common], add_help=False, help="build SOURCE's dataset into --out DIR"
    )
    build.add_argument("-h", "--help", action="store_true", help="show the source's options")
    build.add_argument("source", help="data source name, e.g. sudoku")
    build.add_argument("--out", type=Path, help="output directory (required)")
    build.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    build.add_argument("--force", action="store_true", help="replace an existing --out")
    build.set_defaults(func=run_build, accepts_extra=True)


def _options_parser(source: Any) -> OneLineParser:
    parser = OneLineParser(
        prog=f"trm data build {source.name}",
        description=(source.options_type.__doc__ or "").strip(),
    )
    for field in attrs.fields(attrs.resolve_types(source.options_type)):
        kind = field.type
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(
                flag,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag,
                dest=field.name,
                type=kind,
                default=field.default,
                help=f"{help_text} (default {field.default!r})",
            )
    return parser


def run_build(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    source = find_data_source(pm, args.source)
    parser = _options_parser(source)
    if args.help:
        parser.print_help()
        return 0
    parsed = vars(parser.parse_args(args.extra))
    options = build_options(source, parsed, "trm data build")
    if args.out is None:
        raise TrmError("trm data build: --out DIR is required")
    out = args.out.expanduser()
    if out.exists() and any(out.iterdir()):
        if not args.force:
            raise TrmError(f"{out} exists and is not empty; use --force to replace it")
        shutil.rmtree(out)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        source.build(options, staging, args.seed, info)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        out.rmdir()
    staging.rename(out)
    info(f"wrote {source.name} dataset to {out}")
    return 0
