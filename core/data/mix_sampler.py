"""Which examples each training step of a multi-task mix reads, as a pure function of
(seed, step), like :class:`trm.data.sampler.TrainSampler` for one dataset.

Each step's ``B`` rows are split among the tasks as a multinomial draw over the tasks' weights,
independently from step to step. Each task has its own endless stream of examples (a
:class:`TrainSampler` over its set, seeded per task); a step reads the next rows of each
task's stream, at the position the task's rows of the earlier steps reached.

**Positions without a replay.** The draws are made top-down, so that the position at any
step is found without the steps before it: the steps are cut into chunks of ``C`` steps (a
power of two, the most with ``C * B`` rows under NumPy's hypergeometric limit); a chunk's
rows per task are one multinomial draw of ``C * B`` rows, and each halving of a range of
steps gives its first half a multivariate hypergeometric draw of half its rows from the
range's counts. Splitting a multinomial total that way is exact: every step's rows are a
multinomial draw of ``B`` over the weights, independent of the other steps'. Every draw
comes from a counter-based generator (Philox) at a counter of its (chunk, range) alone, so
step ``s`` takes one walk of ``log2 C`` halvings plus the totals of the chunks before it,
the sampler keeps O(1) state, and a resume at step ``s`` reads exactly what an
uninterrupted run would have read — no sampler state is saved. A batch holds its tasks'
rows in task order.
"""

from __future__ import annotations

import threading

import numpy as np
from attrs import frozen

from trm.data.generation import stream_seed
from trm.data.sampler import SplitIndex, TrainSampler

# the stream of the per-step task draws; each task's example stream is MIX_STREAM + 1 + k
MIX_STREAM = 0x6D6978
# NumPy's multivariate hypergeometric draws need fewer rows than this in the range split.
HYPERGEOMETRIC_MAX_ROWS = 10**9
# the kinds of draw, in the generator's counter: a chunk's total, a range's first half
_CHUNK, _HALF = 0, 1


@frozen
class _Range:
    """A range of steps of the chunk being walked: its first step (from the chunk's), its
    length, its number in the heap of halvings (the chunk is 1, range n halves into 2n and
    2n + 1), each task's stream position at its first step and its rows in all its steps."""

    first: int
    steps: int
    node: int
    start: np.ndarray
    rows: np.ndarray


class MixSampler:
    """Example indices for each step of a mix (see the module docstring). ``weights`` are
    the tasks' sampling weights, in the order of the split's sets; ``max_chunk_rows``
    bounds the rows of one chunk (tests make it small to cross chunks). Thread-safe.

    What it keeps between calls is O(1) in the steps: the chunk walked last, with each task's
    position at its first step, and the ranges of its last walk (at most ``log2 C + 1``), so
    that consecutive steps redo only the halvings where their walks part."""

    def __init__(
        self,
        index: SplitIndex,
        weights: np.ndarray,
        global_batch_size: int,
        seed: int,
        max_chunk_rows: int = HYPERGEOMETRIC_MAX_ROWS,
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
        self.chunk_steps = 1  # a power of two
        while 2 * self.chunk_steps * global_batch_size < max_chunk_rows:
            self.chunk_steps *= 2
        self._lock = threading.Lock()
        # one counter-based generator: each draw sets the counter to its own (kind, chunk,
        # range) and draws from there, so no draw depends on which came before it
        key = np.random.SeedSequence([seed, MIX_STREAM]).generate_state(2, np.uint64)
        self._bits = np.random.Philox(key=key)
        self._generator = np.random.Generator(self._bits)
        self._chunk = -1
        self._walk: list[_Range] = []

    def _rng(self, kind: int, chunk: int, node: int = 0) -> np.random.Generator:
        """The generator at the counter of one draw (lock held). The counter's lowest word,
        which advances as numbers are drawn, starts at 0, so no two draws' numbers meet."""
        state = self._bits.state
        counter = np.array([0, node, chunk, kind], dtype=np.uint64)
        state["state"] = {"counter": counter, "key": state["state"]["key"]}
        state.update(buffer_pos=4, has_uint32=0, uinteger=0)  # nothing buffered
        self._bits.state = state
        return self._generator

    def _chunk_rows(self, chunk: int) -> np.ndarray:
        """Each task's rows in chunk ``chunk``; they sum to ``chunk_steps * B`` (lock held)."""
        rows = self.chunk_steps * self.batch_size
        return self._rng(_CHUNK, chunk).multinomial(rows, self.probabilities).astype(np.int64)

    def _enter_chunk(self, chunk: int) -> None:
        """Start the walk at ``chunk``: each task's position at its first step is the rows of
        the chunks before it, added from the chunk walked last when that is not later."""
        if chunk == self._chunk:
            return
        if self._walk and chunk > self._chunk:
            start, earlier = self._walk[0].start + self._walk[0].rows, self._chunk + 1
        else:
            start, earlier = np.zeros(len(self.tasks), dtype=np.int64), 0
        for passed in range(earlier, chunk):
            start = start + self._chunk_rows(passed)
        self._chunk = chunk
        self._walk = [_Range(0, self.chunk_steps, 1, start, self._chunk_rows(chunk))]

    def _draw(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(each task's stream position at step ``step``, its rows in that step)."""
        chunk, offset = divmod(step, self.chunk_steps)
        with self._lock:
            self._enter_chunk(chunk)
            walk = self._walk
            while not walk[-1].first <= offset < walk[-1].first + walk[-1].steps:
                walk.pop()  # the chunk's range holds every offset: the walk keeps it
            while walk[-1].steps > 1:
                at = walk[-1]
                half = at.steps // 2
                first_half = self._rng(_HALF, chunk, at.node).multivariate_hypergeometric(
                    at.rows, half * self.batch_size
                )
                if offset < at.first + half:
                    walk.append(_Range(at.first, half, 2 * at.node, at.start, first_half))
                else:
                    walk.append(
                        _Range(
                            at.first + half,
                            at.steps - half,
                            2 * at.node + 1,
                            at.start + first_half,
                            at.rows - first_half,
                        )
                    )
            return walk[-1].start.copy(), walk[-1].rows.astype(np.int64)

    def rows_per_task(self, step: int) -> np.ndarray:
        """How many rows of step ``step`` each task gets (they sum to the batch)."""
        return self._draw(step)[1]

    def examples_for_step(self, step: int) -> np.ndarray:
        """The ``global_batch_size`` example indices (of the whole split) step ``step`` reads."""
        start, counts = self._draw(step)
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
