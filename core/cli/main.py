"""The ``trm`` command: argument parsing and the one place errors become exit codes.

Exit codes: 0 done; 1 failure while running; 2 bad input or usage (one line
``trm: error: …``, no traceback unless ``--debug``); 130 stopped by the user after a
checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from trm.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_USAGE,
    OneLineParser,
    RankZeroStopped,
)
from trm.cli.output import error, rank, set_rank
from trm.errors import TrainingFailed, TrmError
from trm.version import __version__


def build_parser(plugins: Sequence[str] = ()) -> argparse.ArgumentParser:
    """``trm``'s parser: the core's commands, then those the plugins add
    (:mod:`trm.cli.plugin_commands`; ``plugins`` holds the ``--plugins`` values)."""
    from trm.cli import estimate_cmd, plugins_cmd, run_cmd
    from trm.cli.plugin_commands import add_plugin_commands

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
        epilog="[NAME] after a command: the plugin that brings it (`trm plugins` lists them; "
        "--plugins no:NAME leaves it out)",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"trm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True
    for module in (
        run_cmd,
        plugins_cmd,
        estimate_cmd,
    ):
        module.register(commands, common)
    add_plugin_commands(commands, common, list(plugins))
    return parser


def plugins_option(argv: Sequence[str]) -> list[str]:
    """The values of every ``--plugins`` in ``argv``, read before the parser exists (the
    plugins it names or switches off decide which commands there are)."""
    values = []
    for index, word in enumerate(argv):
        if word == "--":
            break
        if word == "--plugins" and index + 1 < len(argv):
            values.append(argv[index + 1])
        elif word.startswith("--plugins="):
            values.append(word.removeprefix("--plugins="))
    return values


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names; the exit code.

    Under torchrun every rank runs this with the same arguments: a usage error is printed
    by rank 0 alone (every rank finds the same), a rank's own error is tagged with its rank
    (:func:`trm.cli.output.error`), and an error rank 0 already printed is not repeated
    (:class:`RankZeroStopped`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        # `trm solve` of a model that runs without torch: answered before any plugin loads
        from trm.cli.solver_cmd import solve_without_torch

        solved = solve_without_torch(argv)
        if solved is not None:
            return solved
        from trm.device.distributed import env_world

        set_rank(env_world().rank)
        parser = build_parser(plugins_option(argv))
        try:
            args, extra = parser.parse_known_args(argv)
            if extra and not getattr(args, "accepts_extra", False):
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
        except TrmError as exc:
            raise exc if rank() == 0 else RankZeroStopped(str(exc)) from None
        args.extra = extra
        return int(args.func(args) or EXIT_OK)
    except TrmError as exc:
        if debug:
            traceback.print_exc()
        if not isinstance(exc, RankZeroStopped):
            error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:  # the reader of stdout left: entry() ends quietly
        raise
    except KeyboardInterrupt:
        print("trm: stopped by the user", file=sys.stderr)
        return EXIT_STOPPED
    except Exception as exc:
        if debug or not isinstance(exc, TrainingFailed):
            traceback.print_exc()
        error(str(exc))
        return EXIT_FAILED


def entry() -> None:
    """The console script. A reader that closes the pipe early (``trm … --json | head``)
    ends the command quietly: stdout is pointed at devnull so the interpreter's last flush
    cannot fail again, and the exit code is 0 (as for ``yes | head``'s reader: nothing
    went wrong that the user must hear about)."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    sys.exit(code)


if __name__ == "__main__":
    entry()
