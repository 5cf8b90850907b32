"""torch's process-wide thread count, kept across a call that changes it.

A run sets torch's intra-op thread count for itself (the backend's choice, then the changes
the cpu backend's contention watch asks for). The count is global to the process, so a
caller's torch work after ``trm.train`` or ``trm.estimate`` (a notebook's next cell) would
run on the run's count: :func:`torch_threads_kept` puts the caller's count back however the
call ends. torch's inter-op thread count is never changed by trm (torch allows setting it
only before any parallel work), so there is nothing of it to restore.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads_kept() -> Iterator[int]:
    """Run the block and then restore ``torch.get_num_threads()`` to its value on entry
    (which the block receives), whether the block returns, raises or is interrupted; as a
    decorator (``@torch_threads_kept()``), the same around each call of the function."""
    threads = torch.get_num_threads()
    try:
        yield threads
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
