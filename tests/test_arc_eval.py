"""ARC evaluation: the sampler's batches of whole puzzles, voting, pass@K, submission, solve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trm.data.puzzle_dataset import PuzzleDatasetMetadata, open_split, write_split
from trm.data.sampler import SplitIndex, TrainSampler

# ---------------------------------------------------------------------------------------------
# The sampler


def _split(path: Path, groups: list[list[int]]) -> SplitIndex:
    """A split whose group g holds puzzles of ``groups[g]`` examples each; example e's tokens
    are (e, e, e, e) mod 5 (what they are does not matter to the sampler)."""
    sizes = [n for group in groups for n in group]
    examples, seq_len = sum(sizes), 4
    tokens = (np.arange(examples * seq_len) % 5).reshape(examples, seq_len).astype(np.uint8)
    arrays = {
        "inputs": tokens,
        "labels": tokens,
        "puzzle_identifiers": np.arange(1, len(sizes) + 1, dtype=np.int32),
        "puzzle_indices": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
        "group_indices": np.concatenate([[0], np.cumsum([len(g) for g in groups])]),
    }
    metadata = PuzzleDatasetMetadata(
        seq_len=seq_len,
        vocab_size=5,
        pad_id=0,
        ignore_label_id=0,
        blank_identifier_id=0,
        num_puzzle_identifiers=len(sizes) + 1,
        total_groups=len(groups),
        mean_puzzle_examples=examples / len(sizes),
        total_puzzles=len(sizes),
        sets=["all"],
    )
    write_split(path, metadata, {"all": arrays})
    return SplitIndex(open_split(path))


# Single-example puzzles in groups of 1-4 puzzles, and what trm's sampler read from them for
# two (batch, seed) pairs before multi-example batches existed (computed with that code).
SINGLE_EXAMPLE_GROUPS = [[1] * n for n in (1, 3, 2, 4, 1, 1, 2, 3, 1, 2, 4)]
EARLIER_STEPS = {
    (4, 7): [
        [10, 13, 21, 0], [1, 7, 17, 15], [5, 11, 19, 21], [12, 0, 18, 14],
        [17, 3, 9, 10], [4, 11, 1, 11], [6, 10, 13, 23], [0, 17, 5, 19],
    ],
    (25, 11): [
        [13, 19, 4, 2, 17, 10, 11, 23, 8, 15, 0, 11, 0, 17, 18, 23, 10, 13, 14, 6, 3, 4, 4,
         15, 9],
        [21, 17, 0, 10, 1, 12, 11, 18, 11, 17, 0, 12, 10, 1, 18, 20, 4, 9, 14, 3, 12, 11, 5,
         18, 10],
        [23, 17, 16, 0, 7, 19, 10, 0, 21, 3, 13, 11, 15, 8, 17, 4, 5, 11, 2, 10, 14, 19, 0,
         17, 7],
    ],
}  # fmt: skip


@pytest.mark.parametrize(("batch", "seed"), sorted(EARLIER_STEPS))
def test_single_example_splits_read_what_they_always_read(tmp_path, batch, seed):
    sampler = TrainSampler(_split(tmp_path / "s", SINGLE_EXAMPLE_GROUPS), batch, seed)
    got = [
        sampler.examples_for_step(step).tolist() for step in range(len(EARLIER_STEPS[batch, seed]))
    ]
    assert got == EARLIER_STEPS[batch, seed]
    assert sampler.epoch_rows == len(SINGLE_EXAMPLE_GROUPS)


def _epochs(sampler: TrainSampler, steps: int) -> np.ndarray:
    return np.concatenate([sampler.examples_for_step(s) for s in range(steps)])


def _runs_of_one_puzzle(index: SplitIndex, stream: np.ndarray) -> list[tuple[int, int]]:
    """(puzzle, examples) of each run of consecutive stream positions in one puzzle."""
    puzzles = index.puzzle_of_example(stream)
    runs, start = [], 0
    for at in range(1, len(puzzles) + 1):
        if at == len(puzzles) or puzzles[at] != puzzles[start]:
            runs.append((int(puzzles[start]), at - start))
            start = at
    return runs


# ARC-like: a task's versions share its number of pairs (2-5), so an epoch's length is fixed.
ARC_LIKE_GROUPS = [[n] * v for n, v in ((3, 4), (2, 2), (5, 3), (4, 1), (2, 5), (3, 3))]


def test_a_drawn_puzzle_contributes_all_its_examples_once(tmp_path):
    index = _split(tmp_path / "a", ARC_LIKE_GROUPS)
    sampler = TrainSampler(index, 5, seed=3)
    rows = sum(group[0] for group in ARC_LIKE_GROUPS)
    assert sampler.epoch_rows == rows == 19
    for epoch in range(4):
        order = sampler.epoch_order(epoch)
        runs = _runs_of_one_puzzle(index, order)
        sizes = np.diff(index.puzzle_start)
        # one run per group (each group visited once), each a whole puzzle
        assert len(runs) == len(ARC_LIKE_GROUPS)
        assert all(n == sizes[p] for p, n in runs)
        groups = np.searchsorted(index.group_start, [p for p, _ in runs], side="right") - 1
        assert sorted(groups.tolist()) == list(range(len(ARC_LIKE_GROUPS)))
        assert len(set(order.tolist())) == len(order) == rows  # no example twice
    # the stream is the epochs one after the other, cut into steps of 5 (crossing epochs)
    stream = _epochs(sampler, 4 * rows // 5)
    np.testing.assert_array_equal(
        stream, np.concatenate([sampler.epoch_order(e) for e in range(4)])[: len(stream)]
    )


def test_examples_of_a_puzzle_are_shuffled_within_it(tmp_path):
    index = _split(tmp_path / "a", [[6]])
    sampler = TrainSampler(index, 6, seed=0)
    orders = {tuple(sampler.examples_for_step(step).tolist()) for step in range(8)}
    assert all(sorted(order) == list(range(6)) for order in orders)
    assert len(orders) > 1


VARIED_GROUPS = [[1, 4, 2], [3], [2, 2, 5, 1], [1], [6, 1]]


@pytest.mark.parametrize("groups", [ARC_LIKE_GROUPS, VARIED_GROUPS, SINGLE_EXAMPLE_GROUPS])
def test_a_step_is_a_pure_function_of_seed_and_step(tmp_path, groups):
    index = _split(tmp_path / "a", groups)
    in_order = TrainSampler(index, 7, seed=5)
    expected = [in_order.examples_for_step(s) for s in range(40)]
    resumed = TrainSampler(index, 7, seed=5)  # a resumed run asks for a late step first
    for step in (33, 12, 39, 0, 21):
        np.testing.assert_array_equal(resumed.examples_for_step(step), expected[step])
    other_seed = TrainSampler(index, 7, seed=6)
    assert any(not np.array_equal(other_seed.examples_for_step(s), expected[s]) for s in range(40))


def test_epochs_of_varying_length_still_visit_every_group_once(tmp_path):
    index = _split(tmp_path / "v", VARIED_GROUPS)
    sampler = TrainSampler(index, 4, seed=2)
    # expected rows: the mean puzzle size of each group, added up
    assert sampler.epoch_rows == round(7 / 3 + 3 + 10 / 4 + 1 + 7 / 2)
    stream = _epochs(sampler, 60)
    lengths = [len(sampler.epoch_order(e)) for e in range(20)]
    np.testing.assert_array_equal(
        stream, np.concatenate([sampler.epoch_order(e) for e in range(20)])[: len(stream)]
    )
    assert sum(lengths) >= len(stream) and len(set(lengths)) > 1
    for e in range(5):
        runs = _runs_of_one_puzzle(index, sampler.epoch_order(e))
        assert len(runs) == len(VARIED_GROUPS)


def test_the_schedule_counts_an_epoch_in_examples(tmp_path):
    from trm.spec import TrainSpec

    sampler = TrainSampler(_split(tmp_path / "a", ARC_LIKE_GROUPS), 5, seed=0)
    assert TrainSpec(global_batch_size=5, epochs=10).total_steps(sampler.epoch_rows) == 38
