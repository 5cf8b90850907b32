"""SIGINT and SIGTERM during training: the first asks for a clean stop after a checkpoint; a
second SIGINT quits at once."""

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


class StopRequests:
    """Installs the handlers for its ``with`` block (main thread only) and restores the ones
    it found. ``reason`` is None, "interrupted" (SIGINT) or "terminated" (SIGTERM)."""

    def __init__(self) -> None:
        self.reason: str | None = None
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
        if self.reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.reason = "interrupted" if signum == signal.SIGINT else "terminated"
        # os.write, not print: a handler may run while the main thread is printing.
        os.write(2, _MESSAGES.get(signum, _MESSAGES[signal.SIGTERM]))
