"""Preparing the next steps' batches on a background thread, for the data readers.

:class:`Prefetcher` runs ``produce(step)`` for consecutive steps on a thread, a bounded number
ahead, so the loop finds each step's rows gathered (and, for CUDA, pinned) when it asks — the
work overlaps with the device's. Both built-in readers use it: the memory reader
(:mod:`trm.data.reader`) and the stream reader (the ``streaming`` plugin). Which rows a step
reads stays the sampler's pure function of (seed, step), so prefetching never changes a run.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np

Batch = dict[str, Any]
_POLL_S = 0.1  # how often a blocked producer checks whether it should stop


def pinned(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """``batch`` as torch tensors in pinned (page-locked) host memory, so their copies to a
    CUDA device run non-blocking (``trm.device.transfer.to_device`` keeps them as they are)."""
    import torch

    return {k: torch.from_numpy(np.ascontiguousarray(v)).pin_memory() for k, v in batch.items()}


class Prefetcher:
    """Produces ``produce(step)`` for consecutive steps on a thread, at most ``depth`` ahead.

    :meth:`get` returns the batch of the step asked for; a step other than the next one
    (a restart) drops what was prepared and starts again there. An error in ``produce`` is
    raised by :meth:`get` for that step.
    """

    def __init__(self, produce: Any, depth: int) -> None:
        self.produce = produce
        self.depth = depth
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._next = -1

    def _run(self, first_step: int, stop: threading.Event, out: queue.Queue) -> None:
        step = first_step
        while not stop.is_set():
            try:
                item = (step, self.produce(step), None)
            except BaseException as exc:  # handed to the loop, raised there
                item = (step, None, exc)
            while not stop.is_set():
                try:
                    out.put(item, timeout=_POLL_S)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return
            step += 1

    def _restart(self, step: int) -> None:
        self.close()
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=self.depth)
        self._thread = threading.Thread(
            target=self._run,
            args=(step, self._stop, self._queue),
            name="trm-prefetch",
            daemon=True,
        )
        self._thread.start()
        self._next = step

    def get(self, step: int) -> Batch:
        if self._thread is None or step != self._next:
            self._restart(step)
        got, batch, error = self._queue.get()
        if got != step:  # cannot happen: the queue holds consecutive steps from _next
            raise RuntimeError(f"prefetch served step {got} for step {step}")
        if error is not None:
            self._thread = None
            raise error
        self._next = step + 1
        return batch

    def close(self) -> None:
        """Stop the thread: at once when it waits to hand over a batch (the prepared batches
        are dropped), else when the batch it prepares is done."""
        self._stop.set()
        while True:  # a producer blocked on a full queue can put and see the stop
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not None:
            self._thread.join()
        self._thread = None
