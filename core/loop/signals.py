"""SIGINT and SIGTERM during training: the first asks for a clean stop after a checkpoint; a
second SIGINT quits at once (not under torchrun, which forwards Ctrl-C to workers that
already got it from the terminal)."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

_MESSAGES = {
    signal.SIGINT: b"\ntrm: Ctrl-C: stopping after this step and saving a checkpoint "
    b"(Ctrl-C again quits at once)\n",
    signal.SIGTERM: b"\ntrm: SIGTERM: stopping after this step and saving a checkpoint\n",
}

_TORCHRUN_SIGINT = b"\ntrm: Ctrl-C: stopping after this step and saving a checkpoint\n"


class StopRequests:
    """Installs the handlers for its ``with`` block (main thread only) and restores the ones
    it found. ``reason`` is None, "interrupted" (SIGINT) or "terminated" (SIGTERM).

    ``second_sigint_quits`` False (under torchrun): a second SIGINT is no reason to quit at
    once — Ctrl-C reaches a worker twice, from the terminal and forwarded by torchrun, and
    torchrun itself kills the workers that outlast its shutdown timeout."""

    def __init__(self, second_sigint_quits: bool = True) -> None:
        self.reason: str | None = None
        self.second_sigint_quits = second_sigint_quits
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.reason is not None and signum == signal.SIGINT and self.second_sigint_quits:
            raise KeyboardInterrupt
        if self.reason is not None:
            return
        self.reason = "interrupted" if signum == signal.SIGINT else "terminated"
        message = _MESSAGES.get(signum, _MESSAGES[signal.SIGTERM])
        if not self.second_sigint_quits and signum == signal.SIGINT:
            message = _TORCHRUN_SIGINT
        # os.write, not print: a handler may run while the main thread is printing.
        os.write(2, message)
