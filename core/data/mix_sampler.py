"""Which examples each training step of a multi-task mix reads, as a pure function of
(seed, step), like :class:`trm.data.sampler.TrainSampler` for one dataset.

Step ``s`` draws how many of its ``B`` rows each task gets from a multinomial over the tasks'
weights, with a generator seeded by ``(seed, s)`` alone. Each task has its own endless
stream of examples (a :class:`TrainSampler` over its set, seeded per task); a step reads the
next rows of each task's stream, at the position the task's rows of the earlier steps reached.
Those positions are sums over the earlier steps' draws, computed once and remembered, so
resuming at step ``s`` reads exactly what an uninterrupted run would have read — no sampler
state is saved. A batch holds its tasks' rows in task order.
"""

from __future__ import annotations

import threading

import numpy as np

from trm.data.generation import stream_seed
from trm.data.sampler import SplitIndex, TrainSampler

# the stream of the per-step task draws; each task's example stream is MIX_STREAM + 1 + k
MIX_STREAM = 0x6D6978


class MixSampler:
    """Example indices for each step of a mix (see the module docstring). ``weights`` are
    the tasks' sampling weights, in the order of the split's sets. Thread-safe."""

    def __init__(
        self, index: SplitIndex, weights: np.ndarray, global_batch_size: int, seed: int
    ) -> None:
        self.index = index
        self.batch_size = global_batch_size
        self.seed = seed
        self.probabilities = np.asarray(weights, dtype=np.float64) / np.sum(weights)
        self.tasks = [
            TrainSampler(
                SplitIndex(index.set_split(name)),
                global_batch_size,
                stream_seed(seed, MIX_STREAM + 1 + k),
            )
            for k, name in enumerate(index.set_names)
        ]
        self.epoch_rows = sum(task.epoch_rows for task in self.tasks)
        self._lock = threading.Lock()
        self._starts = [np.zeros(len(self.tasks), dtype=np.int64)]  # per step: positions

    def rows_per_task(self, step: int) -> np.ndarray:
        """How many rows of step ``step`` each task gets (they sum to the batch)."""
        rng = np.random.default_rng([self.seed, MIX_STREAM, step])
        return rng.multinomial(self.batch_size, self.probabilities).astype(np.int64)

    def _start(self, step: int) -> np.ndarray:
        with self._lock:
            while len(self._starts) <= step:
                done = len(self._starts) - 1
                self._starts.append(self._starts[-1] + self.rows_per_task(done))
            return self._starts[step]

    def examples_for_step(self, step: int) -> np.ndarray:
        """The ``global_batch_size`` example indices (of the whole split) step ``step`` reads."""
        start, counts = self._start(step), self.rows_per_task(step)
        offsets = self.index.set_example_offset
        parts = [
            offsets[k] + task.examples_at(int(start[k]), int(counts[k]))
            for k, task in enumerate(self.tasks)
            if counts[k] > 0
        ]
        return np.concatenate(parts).astype(np.int64)

    def epoch_of_step(self, step: int) -> float:
        """Epochs read before step ``step``, by the tasks' epochs added up."""
        return step * self.batch_size / self.epoch_rows
