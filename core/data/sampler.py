"""Which examples each training step reads, as a pure function of (seed, step).

Sampling follows the reference loader: every epoch visits each group once in a shuffled
order; from a group one puzzle is drawn at random, and from that puzzle one example. A group
is an original puzzle with its augmented copies, so each epoch shows one random version of
each original. Step ``s`` reads positions ``[s * B, (s + 1) * B)`` of the endless sequence of
epochs. Because the order depends only on the seed and the step, resuming at step ``s`` reads
exactly what an uninterrupted run would have read — no loader state needs saving.
"""

from __future__ import annotations

import numpy as np

from trm.data.puzzle_dataset import PuzzleSplit


class SplitIndex:
    """The sets of a split seen as one: global example, puzzle and group numbering.

    A split of one set (every trm-built dataset) uses that set's index arrays as they are
    (memory-mapped int32), so the index of a split larger than memory costs no memory; several
    sets are combined into int64 arrays."""

    def __init__(self, split: PuzzleSplit) -> None:
        self.split = split
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
        """Rows of inputs, labels (ignored cells as ``ignore_label``) and puzzle identifiers."""
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
        return {"inputs": inputs, "labels": labels, "puzzle_identifiers": identifiers}


class TrainSampler:
    """Example indices for each optimizer step; see the module docstring for the order."""

    def __init__(self, index: SplitIndex, global_batch_size: int, seed: int) -> None:
        if index.num_groups == 0:
            raise ValueError("cannot sample from a split with no groups")
        self.index = index
        self.batch_size = global_batch_size
        self.seed = seed
        self._cached_epoch = -1
        self._cached_order = np.empty(0, dtype=np.int64)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The example visited at each position of ``epoch`` (one per group)."""
        if epoch != self._cached_epoch:
            idx = self.index
            rng = np.random.default_rng([self.seed, epoch])
            groups = rng.permutation(idx.num_groups)
            g_start, g_end = idx.group_start[groups], idx.group_start[groups + 1]
            puzzles = g_start + (rng.random(len(groups)) * (g_end - g_start)).astype(np.int64)
            p_start, p_end = idx.puzzle_start[puzzles], idx.puzzle_start[puzzles + 1]
            self._cached_order = p_start + (rng.random(len(groups)) * (p_end - p_start)).astype(
                np.int64
            )
            self._cached_epoch = epoch
        return self._cached_order

    def examples_for_step(self, step: int) -> np.ndarray:
        """The ``global_batch_size`` example indices that step ``step`` reads."""
        n = self.index.num_groups
        positions = np.arange(step * self.batch_size, (step + 1) * self.batch_size)
        out = np.empty(self.batch_size, dtype=np.int64)
        epochs = positions // n
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            out[mask] = self.epoch_order(int(epoch))[positions[mask] % n]
        return out

    def epoch_of_step(self, step: int) -> float:
        return step * self.batch_size / self.index.num_groups
