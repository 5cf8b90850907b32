"""The ``trm`` command: argument parsing and the one place errors become exit codes.

Exit codes: 0 done; 1 failure while running; 2 bad input or usage (one line
``trm: error: …``, no traceback unless ``--debug``); 130 stopped by the user after a
checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from trm import __version__
from trm.cli.common import EXIT_FAILED, EXIT_OK, EXIT_STOPPED, EXIT_USAGE, OneLineParser
from trm.errors import TrainingFailed, TrmError


def build_parser() -> argparse.ArgumentParser:
    from trm.cli import (
        analyze_cmd,
        bench_cmd,
        data_cmd,
        estimate_cmd,
        eval_cmd,
        export_cmd,
        import_cmd,
        plugins_cmd,
        report_cmd,
        run_cmd,
    )

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    common.add_argument(
        "--plugins",
        action="append",
        default=[],
        metavar="LIST",
        help="switch plugins on (a,b) or off (no:name); repeatable",
    )
    parser = OneLineParser(
        prog="trm",
        description="Train Tiny Recursive Models on the hardware you have.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"trm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True
    for module in (
        run_cmd,
        plugins_cmd,
        data_cmd,
        eval_cmd,
        bench_cmd,
        analyze_cmd,
        estimate_cmd,
        report_cmd,
        import_cmd,
        export_cmd,
    ):
        module.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "accepts_extra", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        return int(args.func(args) or EXIT_OK)
    except TrmError as exc:
        if debug:
            traceback.print_exc()
        print(f"trm: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("trm: stopped by the user", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as exc:
        if debug or not isinstance(exc, TrainingFailed):
            traceback.print_exc()
        print(f"trm: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
