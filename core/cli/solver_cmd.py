"""``trm solve MODEL PUZZLE [--json]`` for a model that runs without torch.

Before ``trm`` builds its parser (which loads every plugin, and with them torch), ``main``
hands the arguments of a ``trm solve`` here. When a plugin of the ``trm.solvers`` group
offers a solver for MODEL (:func:`trm.formats.find_solver`: an ONNX solver folder, say), the
puzzle is solved and printed here, exactly as ``trm solve`` prints a checkpoint's answer,
and torch is never imported. Otherwise (a checkpoint, a run directory, a shipped model's
name, ``--help``) this returns None and the command runs as usual.

Such a solver runs the model's plain trajectory and takes ``--json`` only; the options of
the torch path (``--attempts``, ``--explore``, …) are refused in one line.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from trm.cli.output import info, print_json
from trm.errors import TrmError
from trm.formats import find_solver
from trm.puzzles import puzzle_argument

_HELP = ("-h", "--help")


class _NotMine(Exception):
    """The arguments are not a plain ``trm solve MODEL PUZZLE``: the full parser takes them."""


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotMine(message)


def _parser() -> argparse.ArgumentParser:
    parser = _QuietParser(prog="trm solve", add_help=False)
    parser.add_argument("checkpoint")
    parser.add_argument("puzzle")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--plugins", action="append", default=[])
    return parser


def _solve_words(argv: Sequence[str]) -> list[str] | None:
    """``argv`` without its command word when the command is ``solve`` (``trm``'s own
    options, ``--debug`` and ``--plugins``, may come first), else None; None for ``--help``."""
    words = list(argv)
    if any(word in _HELP for word in words):
        return None
    index = 0
    while index < len(words) and words[index] != "solve":
        word = words[index]
        if word == "--plugins":
            index += 2
        elif word == "--debug" or word.startswith("--plugins="):
            index += 1
        else:
            return None
    if index >= len(words):
        return None
    return words[:index] + words[index + 1 :]


def solve_without_torch(argv: Sequence[str]) -> int | None:
    """Run ``argv`` (``trm``'s arguments) when it is ``solve`` of a model a torch-free
    solver takes, and return the exit code; None when it is not (``trm`` goes on as usual).
    TrmError for a bad puzzle, a damaged model folder or an option such a solver has not."""
    words = _solve_words(argv)
    if words is None:
        return None
    try:
        args, extra = _parser().parse_known_args(words)
    except _NotMine:
        return None
    solver = find_solver(args.checkpoint, args.plugins)
    if solver is None:
        return None
    if extra:
        raise TrmError(
            f"{' '.join(extra)}: {args.checkpoint} runs without torch and answers with its "
            "plain trajectory (trm solve MODEL PUZZLE [--json]); leave the option out, or "
            "give the checkpoint or run directory it was exported from"
        )
    solution = solver.solve(puzzle_argument(args.puzzle))
    if args.json:
        print_json(solution.document())
    else:
        print(solution)
    info(solver.solved_with)
    return 0
