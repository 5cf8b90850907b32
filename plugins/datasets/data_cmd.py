"""``trm data build SOURCE --out DIR [options]``: build a puzzle-dataset directory.

The options after SOURCE come from the source's ``options_type``: each attrs field becomes
``--field-name`` with its type and default, so a third-party source gets a CLI for free.

Nothing is touched until every input is checked: the source, its options (and the source's
optional ``validate_options(options)``), ``--out`` and ``--seed``. The dataset is built into a
temporary sibling of ``--out`` and swapped in only when complete, so a failure or Ctrl-C leaves
``--out`` exactly as it was. ``--force`` replaces only a folder that holds a trm dataset.
"""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from trm.cli.common import OneLineParser
from trm.cli.output import info
from trm.errors import TrmError
from trm.plan.build import build_into, check_output_folder
from trm.plan.dataset import build_options, data_sources, find_data_source
from trm.plugin_manager import load_plugins
from trm.spec import MAX_SEED

SEED_MAX = MAX_SEED
_COMMON_DESTS = ("out", "seed", "force")


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("data", parents=[common], help="build datasets")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    actions.required = True
    build = actions.add_parser(
        "build", parents=[common], add_help=False, help="build SOURCE's dataset into --out DIR"
    )
    build.add_argument("-h", "--help", action="store_true", help="show the source's options")
    build.add_argument("source", nargs="?", help="data source name, e.g. sudoku, maze, arc")
    _add_common_options(build)
    build.set_defaults(func=run_build, accepts_extra=True, build_parser=build)


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    """``--out``, ``--seed`` and ``--force``: every source's build takes them (shown again in
    ``trm data build SOURCE --help``, beside the source's own options)."""
    group = parser.add_argument_group("every source")
    group.add_argument("--out", help="output directory (required)")
    group.add_argument(
        "--seed", type=int, default=0, help=f"random seed, 0 to {SEED_MAX} (default 0)"
    )
    group.add_argument("--force", action="store_true", help="replace an existing dataset at --out")


def _options_parser(source: Any) -> OneLineParser:
    parser = OneLineParser(
        prog=f"trm data build {source.name}",
        description=(source.options_type.__doc__ or "").strip(),
    )
    _add_common_options(parser)
    group = parser.add_argument_group(f"{source.name} options")
    for field in attrs.fields(attrs.resolve_types(source.options_type)):
        kind = field.type
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata.get("help", "")
        if kind is bool:
            group.add_argument(
                flag,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=help_text,
            )
        else:
            group.add_argument(
                flag,
                dest=field.name,
                type=kind,
                default=field.default,
                help=f"{help_text} (default {field.default!r})",
            )
    return parser


def run_build(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    if args.source is None:
        if args.help:
            args.build_parser.print_help()
            print(f"\ndata sources: {', '.join(sorted(data_sources(pm)))}")
            print("a source's own options: trm data build SOURCE --help")
            return 0
        raise TrmError(
            "trm data build needs a data source, e.g. `trm data build sudoku --out DIR` "
            "(see `trm data build --help`)"
        )
    source = find_data_source(pm, args.source)
    parser = _options_parser(source)
    if args.help:
        parser.print_help()
        return 0
    parsed = vars(parser.parse_args(args.extra))
    for name in _COMMON_DESTS:  # parsed already by the command's own parser
        parsed.pop(name)
    options = build_options(source, parsed, "trm data build")
    validate = getattr(source, "validate_options", None)
    if callable(validate):
        validate(options)
    if not 0 <= args.seed <= SEED_MAX:
        raise TrmError(f"--seed must be between 0 and {SEED_MAX}, got {args.seed}")
    out = check_output_folder(args.out, args.force)
    build_into(source, options, args.seed, out, args.out, args.force, info)
    info(f"wrote {source.name} dataset to {args.out}")
    return 0
