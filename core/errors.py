"""The one error type that reaches a user.

Anything the user can fix — a bad spec key, a missing data directory, an unknown plugin —
raises :class:`TrmError`. The CLI prints it as one line ``trm: error: …`` and exits with
code 2; ``--debug`` shows the traceback. Everything else is a bug and exits with code 1.
"""

from __future__ import annotations


class TrmError(Exception):
    """A problem in the user's input: says what was wrong, where, and what to do."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class RankZeroStopped(TrmError):
    """Under torchrun, on a rank other than 0: rank 0 refused the run's input and printed
    the one error line; this rank exits 2 without printing it again."""


class TrainingFailed(Exception):
    """A running job cannot go on (non-finite loss, repeated checkpoint failures, out of
    memory with nothing left to shrink). The message says which checkpoint is intact and what
    to do; the CLI prints it as one line and exits with code 1."""
