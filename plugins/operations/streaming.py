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

from trm import hookimpl
from trm.data.prefetch import Prefetcher, pinned
from trm.data.puzzle_dataset import PuzzleSplit
from trm.data.reader import Batch, ReaderChoice, StepExamples
from trm.data.sampler import SplitIndex

ACTIVATION = "default"
__all__ = ["Prefetcher", "StreamingReader", "open_dataset"]


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
        return pinned(batch) if self.pin_memory else batch

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
