"""streaming: serve a train split larger than memory from disk, without making the loop wait.

The split's arrays stay memory-mapped (the OS pages them in and out); a background thread
prepares the batches of the next ``data.prefetch_steps`` steps into a bounded queue, reading
each batch's rows in file order (``SplitIndex.gather`` sorts them). On CUDA the prepared
arrays are copied into pinned (page-locked) host memory, so the copy to the GPU runs
non-blocking. Which rows a step reads is the sampler's pure function of (seed, step), so
prefetching never changes a run: resume and out-of-memory retries read the same rows.

It answers ``open_dataset`` for the ``stream`` reader (``data.reader = "stream"``, or ``auto``
when the split does not fit a quarter of the memory budget; see :mod:`trm.data.reader`).
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np

from trm import hookimpl
from trm.data.puzzle_dataset import PuzzleSplit
from trm.data.reader import Batch, ReaderChoice, StepExamples
from trm.data.sampler import SplitIndex

ACTIVATION = "default"
_POLL_S = 0.1  # how often a blocked producer checks whether it should stop


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
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._thread = None


class StreamingReader:
    """The ``stream`` reader: memory-mapped arrays, a background thread preparing batches."""

    name = "stream"

    def __init__(self, split: PuzzleSplit, prefetch_steps: int, pin_memory: bool) -> None:
        self.index = SplitIndex(split)
        self.prefetch_steps = prefetch_steps
        self.pin_memory = pin_memory
        self._examples: StepExamples | None = None
        self._prefetcher: Prefetcher | None = None

    def _gather(self, step: int) -> Batch:
        assert self._examples is not None
        batch = self.index.gather(self._examples(step))
        if self.pin_memory:
            import torch

            return {
                k: torch.from_numpy(np.ascontiguousarray(v)).pin_memory() for k, v in batch.items()
            }
        return batch

    def start(self, examples_for_step: StepExamples, first_step: int) -> None:
        self.close()
        self._examples = examples_for_step
        if self.prefetch_steps > 0:
            self._prefetcher = Prefetcher(self._gather, self.prefetch_steps)

    def batch(self, step: int) -> Batch:
        if self._examples is None:
            raise RuntimeError("StreamingReader.batch before start")
        if self._prefetcher is None:
            return self._gather(step)
        return self._prefetcher.get(step)

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None


@hookimpl
def open_dataset(split: PuzzleSplit, choice: ReaderChoice, device: str) -> StreamingReader | None:
    """The stream reader when the choice is ``stream``; None otherwise."""
    if choice.name != "stream":
        return None
    return StreamingReader(split, choice.prefetch_steps, pin_memory=device.startswith("cuda"))
