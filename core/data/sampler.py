"""Which examples each training step reads, as a pure function of (seed, step).

Sampling follows the reference loader: every epoch visits each group once in a shuffled
order; from a group one puzzle is drawn at random, and *all* of that puzzle's examples are
read, in a shuffled order (the reference's batch composition for puzzles with several
examples, such as an ARC task version and its demonstration pairs). A group is an original
puzzle with its augmented copies, so each epoch shows one random version of each original.

The epochs, one after the other, form an endless stream of examples; step ``s`` reads stream
positions ``[s * B, (s + 1) * B)``. Because the order depends only on the seed and the step,
resuming at step ``s`` reads exactly what an uninterrupted run would have read — no loader
state needs saving. When every puzzle has one example (Sudoku, Maze) this is one example per
group per epoch, the order trm has always used.

Where this differs from the reference, and why: the reference packs each batch with whole
puzzles, cuts the last one that does not fit (its other examples are dropped for that epoch)
and drops an epoch's last partial batch. Here a puzzle that does not fit at the end of a
batch continues at the start of the next, and an epoch's last batch continues into the next
epoch — nothing drawn is dropped, and the stream position of a step is plain arithmetic
(B = 768 and about 3.8 examples per ARC puzzle: at most one puzzle in ~200 per batch is split).

An epoch holds ``epoch_rows`` examples. When every group's puzzles have the same number of
examples (single-example splits; ARC, whose versions of a task share its pairs) that number
is fixed and finding a step's epoch is a division. Otherwise each epoch's length depends on
its draws: the sampler then adds up the lengths of the epochs before (once, remembered), and
``epoch_rows`` is the expected length.
"""

from __future__ import annotations

import bisect
import threading

import numpy as np

from trm.data.puzzle_dataset import PuzzleSplit


class SplitIndex:
    """The sets of a split seen as one: global example, puzzle and group numbering.

    A split of one set (every trm-built dataset) uses that set's index arrays as they are
    (memory-mapped int32), so the index of a split larger than memory costs no memory; several
    sets are combined into int64 arrays."""

    def __init__(self, split: PuzzleSplit, tasks: bool = False) -> None:
        self.split = split
        self.tasks = tasks  # a mix: each set is a task, and a gathered row says whose it is
        self.set_names = list(split.sets)
        if len(self.set_names) == 1:  # the common case: the set's own (memory-mapped) arrays
            only = split.sets[self.set_names[0]]
            self.num_examples = int(only.puzzle_indices[-1])
            self.num_puzzles = len(only.puzzle_indices) - 1
            self.puzzle_start = only.puzzle_indices
            self.group_start = only.group_indices
            self.puzzle_identifier = only.puzzle_identifiers
            self.set_example_offset = np.array([0, self.num_examples])
            self.num_groups = len(self.group_start) - 1
            return
        puzzle_starts, group_starts, identifiers, set_example_offsets = [], [], [], []
        example_offset = puzzle_offset = 0
        for name in self.set_names:
            s = split.sets[name]
            p_idx = np.asarray(s.puzzle_indices, dtype=np.int64)
            g_idx = np.asarray(s.group_indices, dtype=np.int64)
            puzzle_starts.append(p_idx[:-1] + example_offset)
            group_starts.append(g_idx[:-1] + puzzle_offset)
            identifiers.append(np.asarray(s.puzzle_identifiers, dtype=np.int64))
            set_example_offsets.append(example_offset)
            example_offset += int(p_idx[-1])
            puzzle_offset += len(p_idx) - 1
        self.num_examples = example_offset
        self.num_puzzles = puzzle_offset
        self.puzzle_start = np.append(np.concatenate(puzzle_starts), example_offset)
        self.group_start = np.append(np.concatenate(group_starts), puzzle_offset)
        self.puzzle_identifier = np.concatenate(identifiers)
        self.set_example_offset = np.array([*set_example_offsets, example_offset])
        self.num_groups = len(self.group_start) - 1

    def puzzle_of_example(self, examples: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.puzzle_start, examples, side="right") - 1

    def gather(self, examples: np.ndarray, ignore_label: int = -100) -> dict[str, np.ndarray]:
        """Rows of inputs, labels (ignored cells as ``ignore_label``) and puzzle identifiers;
        for a mix (``tasks``) also ``task``, each row's task (its set's number)."""
        examples = np.asarray(examples, dtype=np.int64)
        seq_len = self.split.metadata.seq_len
        inputs = np.empty((len(examples), seq_len), dtype=np.int64)
        labels = np.empty((len(examples), seq_len), dtype=np.int64)
        set_of = np.searchsorted(self.set_example_offset, examples, side="right") - 1
        for k, name in enumerate(self.set_names):
            rows = np.nonzero(set_of == k)[0]
            if len(rows) == 0:
                continue
            local = examples[rows] - self.set_example_offset[k]
            order = np.argsort(local, kind="stable")  # sorted reads are kind to memory maps
            s = self.split.sets[name]
            inputs[rows[order]] = s.inputs[local[order]]
            labels[rows[order]] = s.labels[local[order]]
        ignore_id = self.split.metadata.ignore_label_id
        if ignore_id is not None:
            labels[labels == ignore_id] = ignore_label
        identifiers = self.puzzle_identifier[self.puzzle_of_example(examples)]
        rows = {"inputs": inputs, "labels": labels, "puzzle_identifiers": identifiers}
        if self.tasks:
            rows["task"] = set_of.astype(np.int64)
        return rows

    def set_split(self, name: str) -> PuzzleSplit:
        """The split of set ``name`` alone (a task of a mix)."""
        split = self.split
        return PuzzleSplit(path=split.path, metadata=split.metadata, sets={name: split.sets[name]})


class TrainSampler:
    """Example indices for each optimizer step; see the module docstring for the order.

    Safe to call from several threads (the stream reader prepares steps in the background
    while the loop may ask for step 0's rows)."""

    def __init__(self, index: SplitIndex, global_batch_size: int, seed: int) -> None:
        if index.num_groups == 0:
            raise ValueError("cannot sample from a split with no groups")
        self.index = index
        self.batch_size = global_batch_size
        self.seed = seed
        sizes = np.diff(np.asarray(index.puzzle_start, dtype=np.int64))
        group_first = np.asarray(index.group_start[:-1], dtype=np.int64)
        smallest = np.minimum.reduceat(sizes, group_first)
        largest = np.maximum.reduceat(sizes, group_first)
        puzzles = np.diff(np.asarray(index.group_start, dtype=np.int64))
        # Rows of an epoch when every group's puzzles are of one size (single-example splits,
        # ARC's versions of a task), else None: each epoch's length then depends on its draws.
        self._fixed_rows = int(smallest.sum()) if np.array_equal(smallest, largest) else None
        expected = float(np.sum(np.add.reduceat(sizes, group_first) / puzzles))
        self.epoch_rows = self._fixed_rows or max(1, round(expected))
        self._lock = threading.Lock()
        self._cached: tuple[int, np.ndarray] = (-1, np.empty(0, dtype=np.int64))
        self._epoch_starts = [0]  # epochs' first positions, when their lengths vary

    def _draw(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
        """Epoch ``epoch``'s puzzles in visiting order: their first example and size."""
        idx = self.index
        rng = np.random.default_rng([self.seed, epoch])
        groups = rng.permutation(idx.num_groups)
        g_start, g_end = idx.group_start[groups], idx.group_start[groups + 1]
        puzzles = g_start + (rng.random(len(groups)) * (g_end - g_start)).astype(np.int64)
        first = np.asarray(idx.puzzle_start[puzzles], dtype=np.int64)
        sizes = np.asarray(idx.puzzle_start[puzzles + 1], dtype=np.int64) - first
        return first, sizes, rng

    def _order(self, epoch: int) -> np.ndarray:
        cached_epoch, cached_order = self._cached
        if cached_epoch == epoch:
            return cached_order
        first, sizes, rng = self._draw(epoch)
        total = int(sizes.sum())
        owner = np.repeat(np.arange(len(sizes)), sizes)
        within = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        shuffled = np.lexsort((rng.random(total), owner))  # each puzzle's examples shuffled
        order = (np.repeat(first, sizes) + within)[shuffled]
        self._cached = (epoch, order)
        return order

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The example visited at each position of ``epoch``: per group in the epoch's group
        order, all examples of one drawn puzzle, in a shuffled order."""
        with self._lock:
            return self._order(epoch)

    def _epoch_start(self, epoch: int) -> int:
        """The stream position where ``epoch`` begins (lock held)."""
        if self._fixed_rows is not None:
            return epoch * self._fixed_rows
        while len(self._epoch_starts) <= epoch:
            e = len(self._epoch_starts) - 1
            self._epoch_starts.append(self._epoch_starts[-1] + int(self._draw(e)[1].sum()))
        return self._epoch_starts[epoch]

    def _epoch_at(self, position: int) -> int:
        """The epoch holding stream position ``position`` (lock held)."""
        if self._fixed_rows is not None:
            return position // self._fixed_rows
        while self._epoch_starts[-1] <= position:
            self._epoch_start(len(self._epoch_starts))
        return bisect.bisect_right(self._epoch_starts, position) - 1

    def examples_for_step(self, step: int) -> np.ndarray:
        """The ``global_batch_size`` example indices that step ``step`` reads: stream
        positions ``[step * B, (step + 1) * B)``."""
        return self.examples_at(step * self.batch_size, self.batch_size)

    def examples_at(self, first: int, count: int) -> np.ndarray:
        """The example indices at stream positions ``[first, first + count)``."""
        out = np.empty(count, dtype=np.int64)
        filled = 0
        with self._lock:
            epoch = self._epoch_at(first)
            while filled < count:
                order = self._order(epoch)
                at = first + filled - self._epoch_start(epoch)
                take = min(count - filled, len(order) - at)
                out[filled : filled + take] = order[at : at + take]
                filled += take
                epoch += 1
        return out

    def epoch_of_step(self, step: int) -> float:
        """Epochs read before step ``step`` (by the mean epoch length when lengths vary)."""
        return step * self.batch_size / self.epoch_rows
