"""What every command shares: exit codes, the parser that fails in one line, argument types."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from trm.errors import RankZeroStopped, TrmError
from trm.paths import out_argument

__all__ = ["RankZeroStopped"]  # re-exported: raised by trm.api under torchrun too

EXIT_OK = 0
EXIT_FAILED = 1  # a failure while running (TrainingFailed, a bug)
EXIT_USAGE = 2  # bad input: one line ``trm: error: …``
EXIT_STOPPED = 130  # stopped by the user (after a checkpoint, when one could be written)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one ``trm: error:`` line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise TrmError(f"{message} (see `{self.prog} --help`)")


def _whole_number(text: str, minimum: int, meaning: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {meaning}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    return _whole_number(text, 1, "at least 1")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0 (0 usually means "all")."""
    return _whole_number(text, 0, "0 (all) or more")


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (not nan, not inf)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, got {text}")
    return value


def out_folder(text: str) -> Path:
    """An argparse type for ``--out``: a path, never empty text (which would mean the current
    folder)."""
    try:
        path = out_argument(text)
    except TrmError:
        raise argparse.ArgumentTypeError("is empty; give the folder to write to") from None
    assert path is not None
    return path


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable): override a spec value."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec value, e.g. --set train.lr=3e-4; repeatable",
    )
