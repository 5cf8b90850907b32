"""streaming: serve a train split larger than memory from disk, without making the loop wait.

The split's arrays stay memory-mapped (the OS pages them in and out); a background thread
prepares the batches of the next ``data.prefetch_steps`` steps into a bounded queue, reading
each batch's rows in file order (``SplitIndex.gather`` sorts them). Where the run's backend
copies from pinned memory (CUDA's, or any backend whose ``pins_host_batches`` says so) the
prepared arrays are copied into pinned (page-locked) host memory, so the copy to the device
runs non-blocking. Which rows a step reads is the sampler's pure function of (seed, step), so
prefetching never changes a run: resume and out-of-memory retries read the same rows.

It answers ``open_dataset`` for the ``stream`` reader (``data.reader = "stream"``, or ``auto``
when the split does not fit a quarter of the memory budget; see :mod:`trm.data.reader`).
"""

from __future__ import annotations

from trm import hookimpl
from trm.data.prefetch import Prefetcher
from trm.data.puzzle_dataset import PuzzleSplit
from trm.data.reader import PrefetchingReader, ReaderChoice

ACTIVATION = "default"
__all__ = ["Prefetcher", "StreamingReader", "open_dataset"]


class StreamingReader(PrefetchingReader):
    """The ``stream`` reader: memory-mapped arrays, a background thread preparing batches."""

    name = "stream"


@hookimpl
def open_dataset(
    split: PuzzleSplit, choice: ReaderChoice, pin_memory: bool
) -> StreamingReader | None:
    """The stream reader when the choice is ``stream`` (pinning its batches where the run's
    backend copies from pinned memory); None otherwise."""
    if choice.name != "stream":
        return None
    return StreamingReader(split, choice.prefetch_steps, pin_memory=pin_memory)
