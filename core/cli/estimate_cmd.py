"""``trm estimate SPEC``: the itemised peak memory of a training step against the budget.

Exit 0 when the run fits, 1 when it does not (2 for bad input). The spec is first fitted to
the tier ``--mode`` names (balanced by default, as ``trm run``) and held against the tier's
share of the budget; ``--mode as-written`` holds the spec unchanged against the whole budget.
"""

from __future__ import annotations

import argparse

from trm.api.estimating import AS_WRITTEN, estimate_memory
from trm.cli.common import add_set_option
from trm.cli.output import info, print_json
from trm.memory import DEFAULT_MODE, MODES

EXIT_FITS, EXIT_DOES_NOT_FIT = 0, 1


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "estimate", parents=[common], help="predict a run's peak memory, item by item"
    )
    parser.add_argument("spec", help="a TOML file or the name of a shipped spec")
    parser.add_argument(
        "--mode",
        choices=(*MODES, AS_WRITTEN),
        default=DEFAULT_MODE,
        help=f"fit the spec to this tier first, as trm run does (default {DEFAULT_MODE}); "
        "as-written: the spec unchanged, against the whole budget",
    )
    add_set_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = estimate_memory(args.spec, tuple(args.plugins), tuple(args.set), args.mode, None, info)
    if args.json:
        print_json(result.document())
    else:
        for note in result.notes:
            info(note)
        print(result.table())
    return EXIT_FITS if result.fits else EXIT_DOES_NOT_FIT
