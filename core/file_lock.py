"""The one exclusive file lock trm holds: a run directory's ``.lock`` and a study's trial
claims and ``.ask.lock`` (the ``filelock`` library: ``flock`` on POSIX, ``msvcrt`` on
Windows). The kernel drops a lock when its holder dies, so a lock that can be taken is one
nobody holds, even after SIGKILL."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
from filelock import FileLock, Timeout


@attrs.define
class HeldLock:
    """A lock this process holds on ``path``; :meth:`close` releases it (the file stays)."""

    path: Path
    lock: FileLock

    def close(self) -> None:
        """Release the lock."""
        self.lock.release()


def hold_lock(path: Path, wait: bool = False) -> HeldLock | None:
    """Take the exclusive lock on ``path`` (created when missing) and write ``pid N`` into it;
    None when another process holds it. ``wait``: block until it is free, and leave the
    file as it is (a lock taken for a moment, such as a study's ``.ask.lock``). OSError when
    the file cannot be created."""
    lock = FileLock(str(path), timeout=-1 if wait else 0)
    try:
        lock.acquire()
    except Timeout:
        return None
    if not wait:
        with path.open("w", encoding="utf-8") as holder:
            holder.write(f"pid {os.getpid()}\n")
    return HeldLock(path, lock)


def lock_holder(path: Path) -> str:
    """What ``path``'s holder wrote into it ("pid N"), or "another process"."""
    try:
        return path.read_text(encoding="utf-8").strip() or "another process"
    except (OSError, UnicodeDecodeError):
        return "another process"
