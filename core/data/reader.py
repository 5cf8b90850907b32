"""Data readers: how a split's rows reach the loop.

A reader serves the train split to the loop one step at a time. Which rows step ``s`` reads is
the sampler's pure function of (seed, step) — a reader only decides *how* they are read, never
*which*, so readers, prefetching and resuming never change what a run learns.

The protocol (:class:`DataReader`) is what the ``open_dataset`` hook returns; a third party
can implement it. Built in:

- ``memory`` (this module, :class:`MemoryReader`): the split's arrays held in memory — the
  memory-mapped files read through once, so their pages sit in the OS page cache, which
  every process of a node shares (under torchrun the ranks hold one copy, not one each) —
  and, for an accelerator, the next ``prefetch_steps`` batches gathered (and pinned for CUDA)
  by a background thread (:mod:`trm.data.prefetch`) — fastest for data that fit;
- ``stream`` (the ``streaming`` plugin): arrays memory-mapped, the next ``prefetch_steps``
  batches prepared by a background thread, rows of a batch read in file order.

``data.reader = "auto"`` (the default) keeps a split in memory when its inputs and labels take
at most :data:`MEMORY_SHARE` of the host memory budget, and streams it otherwise;
:func:`choose_reader` decides and says why. An explicit ``memory`` reader whose data take more
than :data:`MEMORY_MAX_SHARE` of the budget is refused before training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np
from attrs import frozen

from trm.data.prefetch import Prefetcher, pinned
from trm.data.puzzle_dataset import PuzzleSplit
from trm.data.sampler import SplitIndex
from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.hardware import HardwareProfile, format_bytes
from trm.spec import RunSpec

Batch = dict[str, np.ndarray]
StepExamples = Callable[[int], np.ndarray]

MEMORY_SHARE = 0.25  # auto: in memory when the split takes at most this share of the budget
MEMORY_MAX_SHARE = 0.8  # an explicit memory reader is refused above this share
# Bytes of one row of a gathered batch: inputs and labels as int64, the identifier as int64.
GATHERED_BYTES_PER_TOKEN = 2 * 8


@runtime_checkable
class DataReader(Protocol):
    """Serves one split's rows. ``index`` numbers its examples, puzzles and groups.

    The loop calls :meth:`start` once (after resuming), then :meth:`batch` for consecutive
    steps, and :meth:`close` however the run ends. ``batch(step)`` must return exactly the rows
    ``examples_for_step(step)`` names, in that order, whatever the reader prepares ahead; it
    may be asked for the same step again only after :meth:`start`.
    """

    name: str
    index: SplitIndex

    def start(self, examples_for_step: StepExamples, first_step: int) -> None:
        """Serve steps ``first_step, first_step + 1, …`` whose rows ``examples_for_step``
        names (a pure function of the step)."""
        ...

    def batch(self, step: int) -> Batch:
        """The rows of ``step``: inputs, labels (ignored cells as -100), puzzle identifiers."""
        ...

    def close(self) -> None:
        """Stop any background work and release what the reader holds."""
        ...


@frozen
class ReaderChoice:
    """Which reader serves the train split, and why (shown in the run log and by estimate)."""

    name: str
    reason: str
    prefetch_steps: int


def split_bytes(dataset: DatasetShape) -> int:
    """Bytes of the train split's inputs and labels (0 when not known)."""
    return int(dataset.train_file_bytes)


def choose_reader(spec: RunSpec, dataset: DatasetShape, hardware: HardwareProfile) -> ReaderChoice:
    """The reader for ``spec``'s train split on this machine; TrmError for an explicit
    ``memory`` reader whose data cannot fit (see the module docstring)."""
    data = spec.data
    size = split_bytes(dataset)
    budget = hardware.memory_budget_bytes
    share = None if not budget else size / budget
    sizes = f"{format_bytes(size)} of inputs and labels"
    if budget:
        sizes += f", {share:.0%} of the {format_bytes(budget)} memory budget"
    if data.reader == "memory":
        if share is not None and share > MEMORY_MAX_SHARE:
            raise TrmError(
                f"data.reader = 'memory' cannot hold the train split ({sizes}; at most "
                f"{MEMORY_MAX_SHARE:.0%}); use data.reader = 'stream' or 'auto'"
            )
        return ReaderChoice("memory", f"asked for ({sizes})", data.prefetch_steps)
    if data.reader == "stream":
        return ReaderChoice("stream", f"asked for ({sizes})", data.prefetch_steps)
    if share is not None and share > MEMORY_SHARE:
        return ReaderChoice(
            "stream",
            f"the split does not fit {MEMORY_SHARE:.0%} of memory ({sizes})",
            data.prefetch_steps,
        )
    why = f"the split fits in memory ({sizes})" if budget else f"memory budget unknown ({sizes})"
    return ReaderChoice("memory", why, data.prefetch_steps)


def reader_buffer_bytes(spec: RunSpec, dataset: DatasetShape, choice: ReaderChoice) -> int:
    """Host bytes the reader holds: the prefetched batches, and the split when in memory."""
    batch = spec.train.global_batch_size * (dataset.seq_len * GATHERED_BYTES_PER_TOKEN + 8)
    prefetched = (choice.prefetch_steps + 1) * batch
    return prefetched + (split_bytes(dataset) if choice.name == "memory" else 0)


class PrefetchingReader:
    """What the built-in readers share: a :class:`SplitIndex` over the split, each step's rows
    gathered (and pinned when ``pin_memory``) on demand or, with ``prefetch_steps`` > 0, by a
    background :class:`Prefetcher` the next steps ahead. A subclass sets ``name`` and decides
    how the split's arrays are held; :meth:`batch` keeps the :class:`DataReader` contract."""

    name = "prefetching"

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
            raise RuntimeError(f"{type(self).__name__}.batch before start")
        if self._prefetcher is None:
            return self._gather(step)
        return self._prefetcher.get(step)

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None


class MemoryReader(PrefetchingReader):
    """The ``memory`` reader; see the module docstring.

    The split's token arrays stay the memory-mapped ones :func:`open_split` gives (no private
    copy): :meth:`warm` reads each file through once so it is resident, in the page cache the
    processes of a node share. With ``prefetch_steps`` > 0 a background thread gathers the
    next steps' rows (and pins them when ``pin_memory``: the backend copies from pinned
    memory) while the loop trains; with 0 each step is gathered when the loop asks.
    """

    name = "memory"
    WARM_CHUNK_BYTES = 8 * 2**20

    def __init__(self, split: PuzzleSplit, prefetch_steps: int = 0, pin_memory: bool = False):
        super().__init__(split, prefetch_steps, pin_memory)
        self.warmed_bytes = sum(
            self.warm(array) for s in split.sets.values() for array in (s.inputs, s.labels)
        )

    @classmethod
    def warm(cls, array: np.ndarray) -> int:
        """Read ``array``'s file through once (into the page cache); returns its bytes. An
        array that is not memory-mapped is already in memory (0)."""
        filename = getattr(array, "filename", None)
        if not isinstance(array, np.memmap) or not filename:
            return 0
        read = 0
        with open(filename, "rb", buffering=0) as handle:
            while chunk := handle.read(cls.WARM_CHUNK_BYTES):
                read += len(chunk)
        return read
