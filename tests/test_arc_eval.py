"""ARC evaluation: the sampler's batches of whole puzzles, voting, pass@K, submission, solve."""

from __future__ import annotations

import hashlib
import json
import pickle
import struct
import types
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import assert_one_line_error
from trm import TrmError, hookimpl
from trm.data.puzzle_dataset import PuzzleDatasetMetadata, open_split, write_split
from trm.data.sampler import SplitIndex, TrainSampler
from trm.plugins.tasks.arc import grids
from trm.plugins.tasks.arc.evaluator import (
    PASS_KS,
    TRM_RULES,
    ArcEvaluator,
    ArcTestSet,
    candidate_key,
)
from trm.plugins.tasks.arc.source import ArcBuildOptions, ArcSource
from trm.plugins.tasks.arc.tasks import ArcTask

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


# ---------------------------------------------------------------------------------------------
# The evaluator: votes, pass@K, submission.json


def _grid(rng: np.random.Generator, colours: int = 4) -> np.ndarray:
    h, w = rng.integers(2, 6, size=2)
    return rng.integers(0, colours, size=(h, w)).astype(np.uint8)


def _task(task_id: str, rng: np.random.Generator, tests: int = 1) -> ArcTask:
    """A task whose output is its input flipped left-right."""
    pairs = [(g, np.fliplr(g).copy()) for g in (_grid(rng) for _ in range(3 + tests))]
    return ArcTask(task_id, tuple(pairs[:3]), tuple(pairs[3:]))


def _versions(rng: np.random.Generator, count: int) -> list[tuple[int, np.ndarray]]:
    """The original and ``count - 1`` random (dihedral id, colour map) augmentations."""
    out = [(0, grids.IDENTITY_MAP.copy())]
    while len(out) < count:
        out.append((int(rng.integers(8)), np.concatenate([[0], rng.permutation(9) + 1])))
    return out


class _Rows:
    """Test rows of tasks in every given version, as a built test split holds them."""

    def __init__(self, tasks: list[ArcTask], versions: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.names = ["<blank>"]
        inputs, labels, ids = [], [], []
        for task in tasks:
            for k, cmap in _versions(rng, versions):
                name = task.task_id if k == 0 and (cmap == grids.IDENTITY_MAP).all() else None
                self.names.append(name or grids.augmented_name(task.task_id, k, cmap))
                for grid_in, grid_out in task.test:
                    inputs.append(grids.encode(grids.augment(grid_in, k, cmap)))
                    labels.append(grids.encode(grids.augment(grid_out, k, cmap)))
                    ids.append(len(self.names) - 1)
        order = rng.permutation(len(ids))  # rows in any order
        self.inputs = np.stack(inputs)[order]
        self.labels = np.stack(labels)[order]
        self.ids = np.array(ids)[order]
        self.test_set = ArcTestSet(self.names, tasks)

    def feed(self, evaluator: ArcEvaluator, predictions: np.ndarray, conf=None, batch=5) -> None:
        conf = np.full(len(self.ids), 0.5) if conf is None else conf
        for s in range(0, len(self.ids), batch):
            b = slice(s, s + batch)
            evaluator.add(self.inputs[b], self.ids[b], predictions[b], conf[b])


def _tasks(count: int = 4, seed: int = 1) -> list[ArcTask]:
    rng = np.random.default_rng(seed)
    return [_task(f"task{n:04d}", rng, tests=1 + n % 2) for n in range(count)]


def test_true_answers_through_random_augmentations_score_pass_at_2_of_one():
    rows = _Rows(_tasks(), versions=9)
    evaluator = ArcEvaluator(rows.test_set)
    rows.feed(evaluator, rows.labels)
    result = evaluator.result()
    assert result["pass@1"] == result["pass@2"] == 1.0
    assert set(result) == {f"pass@{k}" for k in PASS_KS}
    assert evaluator.rows_matched == evaluator.rows_seen == len(rows.ids)


def _spoil(tokens: np.ndarray) -> np.ndarray:
    """Each answer with its top-left cell set to another colour (still a decodable grid)."""
    spoiled = tokens.copy()
    spoiled[:, 0] = np.where(spoiled[:, 0] == 2, 3, 2)
    return spoiled


def test_wrong_answers_score_zero_at_every_k():
    rows = _Rows(_tasks(), versions=9)
    evaluator = ArcEvaluator(rows.test_set)
    rows.feed(evaluator, _spoil(rows.labels))
    assert set(evaluator.result().values()) == {0.0}


def test_answers_left_augmented_do_not_count():
    """Un-augmenting is needed: the augmented labels un-augmented twice are wrong answers."""
    rows = _Rows(_tasks(), versions=9)
    evaluator = ArcEvaluator(rows.test_set)
    rows.feed(evaluator, rows.labels)
    originals = [t.test[0][1] for t in rows.test_set.tasks.values()]
    assert all(
        np.array_equal(evaluator.attempts(t, 0)[0], o)
        for t, o in zip(rows.test_set.tasks, originals, strict=True)
    )


def _one_input_task() -> tuple[ArcTask, np.ndarray, np.ndarray, np.ndarray]:
    """A task with one test input, and grids A (= its output), B and C."""
    a = np.array([[1, 2], [3, 4]], dtype=np.uint8)
    task = ArcTask("vote", ((a, a),), ((np.array([[5]], dtype=np.uint8), a),))
    return task, a, np.array([[4, 3], [2, 1]], dtype=np.uint8), np.array([[7]], dtype=np.uint8)


def _votes(task: ArcTask, answers: list[np.ndarray], confidences: list[float]) -> ArcEvaluator:
    """Each answer as one row of the original version (identifier 1)."""
    evaluator = ArcEvaluator(ArcTestSet(["<blank>", task.task_id], [task]))
    n = len(answers)
    evaluator.add(
        np.stack([grids.encode(task.test[0][0])] * n),
        np.ones(n, dtype=np.int64),
        np.stack([grids.encode(g) for g in answers]),
        np.array(confidences),
    )
    return evaluator


def test_the_vote_picks_the_majority_over_a_more_confident_minority():
    task, a, b, c = _one_input_task()
    evaluator = _votes(task, [b, a, b, c, b, a], [0.1, 0.99, 0.1, 0.9, 0.1, 0.99])
    ranked = evaluator.candidates("vote", 0)
    assert [r.votes for r in ranked] == [3, 2, 1]
    assert np.array_equal(ranked[0].grid, b) and np.array_equal(ranked[1].grid, a)
    assert ranked[0].confidence == pytest.approx(0.1)
    result = evaluator.result()
    assert (result["pass@1"], result["pass@2"]) == (0.0, 1.0)


def test_a_tie_in_votes_goes_to_the_higher_mean_confidence():
    task, a, b, c = _one_input_task()
    evaluator = _votes(task, [b, a, b, a, c], [0.5, 0.7, 0.6, 0.5, 1.0])  # means b .55, a .6
    ranked = evaluator.candidates("vote", 0)
    assert [np.array_equal(r.grid, g) for r, g in zip(ranked, (a, b, c), strict=True)] == [True] * 3
    assert evaluator.result()["pass@1"] == 1.0
    swapped = _votes(task, [b, a, b, a], [0.7, 0.5, 0.6, 0.5])  # means b .65, a .5
    assert swapped.result()["pass@1"] == 0.0 and swapped.result()["pass@2"] == 1.0


def _reference_crop(tokens: np.ndarray) -> np.ndarray:
    """The reference evaluator's crop, transcribed: widest run of colours (2..11) from the
    top-left, narrowing row by row, the largest area; 0x0 when the first cell is no colour."""
    grid = np.asarray(tokens).reshape(30, 30)
    best, size, width = 0, (0, 0), 30
    for rows in range(1, 31):
        for c in range(1, width + 1):
            if not 2 <= grid[rows - 1, c - 1] <= 11:
                width = c - 1
                break
        if rows * width > best:
            best, size = rows * width, (rows, width)
    return (grid[: size[0], : size[1]] - 2).astype(np.uint8)


def _reference_pass(task: ArcTask, rows: list[tuple[np.ndarray, float]], ks) -> list[float]:
    """pass@K of the reference's evaluators/arc.py for answers (tokens, confidence) to the
    task's one test input, transcribed: a dict of [count, confidence sum] per answer hash in
    arrival order, means, then ``sorted(..., key=lambda kv: kv[1], reverse=True)``."""

    def digest(grid: np.ndarray) -> str:
        return hashlib.sha256(bytes(grid.shape) + grid.tobytes()).hexdigest()

    p_map: dict[str, list[float]] = {}
    for tokens, q in rows:
        h = digest(_reference_crop(tokens))
        p_map.setdefault(h, [0, 0])
        p_map[h][0] += 1
        p_map[h][1] += q
    for stats in p_map.values():
        stats[1] /= stats[0]
    ranked = sorted(p_map.items(), key=lambda kv: kv[1], reverse=True)
    truth = digest(task.test[0][1])
    return [float(any(h == truth for h, _ in ranked[:k])) for k in ks]


_EMPTY = np.ones(900, dtype=np.int64)  # an answer whose first cell is EOS: crops to 0x0

# (case, answers as names, confidences, (pass@1, pass@2) by the reference's rules,
#  (pass@1, pass@2) by trm's own rules)
VOTE_CASES = [
    ("exact tie, the answer first", "ab", [0.5, 0.5], (1.0, 1.0), (1.0, 1.0)),
    ("exact tie, the answer second", "ba", [0.5, 0.5], (0.0, 1.0), (1.0, 1.0)),
    ("exact three-way tie, the answer last", "cba", [0.5] * 3, (0.0, 0.0), (0.0, 1.0)),
    ("empty crops outvote the answer", "eea", [0.5] * 3, (0.0, 1.0), (1.0, 1.0)),
    ("an empty crop ties with the answer", "ea", [0.5, 0.5], (0.0, 1.0), (1.0, 1.0)),
    ("only empty crops", "ee", [0.9, 0.9], (0.0, 0.0), (0.0, 0.0)),
    ("votes beat confidence", "bba", [0.1, 0.1, 0.99], (0.0, 1.0), (0.0, 1.0)),
    ("a vote tie goes to the higher mean", "ab", [0.4, 0.6], (0.0, 1.0), (0.0, 1.0)),
]


@pytest.mark.parametrize(
    ("answers", "confidences", "reference", "trm_rules"),
    [case[1:] for case in VOTE_CASES],
    ids=[case[0] for case in VOTE_CASES],
)
def test_the_vote_equals_the_reference_evaluator_on_ties_and_empty_crops(
    answers, confidences, reference, trm_rules
):
    task, a, b, c = _one_input_task()
    # trm's own rule orders exact ties by the grid's bytes: c (1x1) before a before b
    assert candidate_key(c) < candidate_key(a) < candidate_key(b)
    tokens = {"a": grids.encode(a), "b": grids.encode(b), "c": grids.encode(c), "e": _EMPTY}
    rows = [(tokens[n], q) for n, q in zip(answers, confidences, strict=True)]
    assert tuple(_reference_pass(task, rows, (1, 2))) == reference  # the table is right
    for rules, expected in ((None, reference), (TRM_RULES, trm_rules)):
        kwargs = {} if rules is None else {"rules": rules}
        evaluator = ArcEvaluator(ArcTestSet(["<blank>", task.task_id], [task]), **kwargs)
        evaluator.add(
            np.stack([grids.encode(task.test[0][0])] * len(rows)),
            np.ones(len(rows), dtype=np.int64),
            np.stack([t for t, _ in rows]),
            np.array(confidences),
        )
        result = evaluator.result()
        assert (result["pass@1"], result["pass@2"]) == expected, rules


def test_unknown_vote_rules_are_one_error():
    task, *_ = _one_input_task()
    with pytest.raises(TrmError, match="reference, trm"):
        ArcEvaluator(ArcTestSet(["<blank>", task.task_id], [task]), rules="majority")


def test_a_task_scores_the_fraction_of_its_test_inputs_solved():
    rng = np.random.default_rng(4)
    two, one = _task("two", rng, tests=2), _task("one", rng, tests=1)
    rows = _Rows([two, one], versions=3)
    predictions = rows.labels.copy()
    # spoil every row of the second test input of "two"
    second = np.array(
        [
            rows.test_set.version(int(i))[0] == "two"
            and np.array_equal(
                grids.unaugment(grids.decode(x), *rows.test_set.version(int(i))[1:]),
                two.test[1][0],
            )
            for x, i in zip(rows.inputs, rows.ids, strict=True)
        ]
    )
    predictions[second] = _spoil(predictions[second])
    evaluator = ArcEvaluator(rows.test_set)
    rows.feed(evaluator, predictions)
    assert evaluator.result()["pass@2"] == pytest.approx((0.5 + 1.0) / 2)


def test_submission_json_has_arc_prizes_layout():
    tasks = _tasks(3)
    unseen = _task("unseen", np.random.default_rng(9), tests=2)
    rows = _Rows(tasks, versions=4)
    test_set = ArcTestSet(rows.names, [*tasks, unseen])
    evaluator = ArcEvaluator(test_set)
    rows.feed(evaluator, rows.labels)
    document = json.loads(json.dumps(evaluator.submission()))
    assert list(document) == [t.task_id for t in [*tasks, unseen]]
    for task in [*tasks, unseen]:
        entries = document[task.task_id]
        assert isinstance(entries, list) and len(entries) == len(task.test)
        for n, entry in enumerate(entries):
            assert set(entry) == {"attempt_1", "attempt_2"}
            for grid in entry.values():
                assert isinstance(grid, list) and all(isinstance(r, list) for r in grid)
                assert all(isinstance(c, int) and 0 <= c <= 9 for r in grid for c in r)
            if task is unseen:  # no answer at all: a 1x1 black grid, twice
                assert entry == {"attempt_1": [[0]], "attempt_2": [[0]]}
            else:  # one candidate: the un-augmented true output, repeated
                assert entry["attempt_1"] == entry["attempt_2"] == task.test[n][1].tolist()


def test_sharded_records_merge_into_the_same_result():
    rows = _Rows(_tasks(), versions=6)
    rng = np.random.default_rng(2)
    predictions = np.where(
        rng.random(len(rows.ids))[:, None] < 0.4, _spoil(rows.labels), rows.labels
    )
    conf = rng.random(len(rows.ids))
    whole = ArcEvaluator(rows.test_set)
    rows.feed(whole, predictions, conf)
    shards = []
    for part in np.array_split(rng.permutation(len(rows.ids)), 3):
        shard = ArcEvaluator(rows.test_set)
        shard.add(rows.inputs[part], rows.ids[part], predictions[part], conf[part])
        shards.append(pickle.loads(pickle.dumps(shard.records())))
    merged = ArcEvaluator(rows.test_set)
    for records in shards:
        merged.merge(records)
    assert merged.result() == pytest.approx(whole.result())
    assert merged.submission() == whole.submission()
    assert 0 < whole.result()["pass@1"] < 1


def test_blank_unknown_and_unmatched_rows_are_ignored():
    rows = _Rows(_tasks(2), versions=2)
    evaluator = ArcEvaluator(rows.test_set)
    stranger = grids.encode(np.full((3, 3), 9, dtype=np.uint8))
    evaluator.add(
        np.stack([rows.inputs[0], rows.inputs[0], stranger, np.zeros(900, dtype=np.uint8)]),
        np.array([0, 999, 1, 1]),
        np.stack([rows.labels[0]] * 4),
        np.full(4, 0.5),
    )
    assert evaluator.records() == [] and evaluator.rows_seen == 4
    assert set(evaluator.result().values()) == {0.0}


def test_pooling_across_evaluations_is_off_by_default():
    from trm.evaluation.task_evaluation import TaskEvaluation
    from trm.spec import TrainSpec

    rows = _Rows(_tasks(2), versions=1)  # one row per test input: one vote per evaluation
    assert TrainSpec().eval_pool is False
    for pool, votes_second in ((False, 1), (True, 2)):
        scoring = TaskEvaluation(make=lambda: ArcEvaluator(rows.test_set), pool=pool)
        for _ in range(2):
            evaluator = scoring.start()
            rows.feed(evaluator, rows.labels)
            scoring.finish(evaluator)
        assert {r[3] for r in evaluator.records()} == {votes_second}


# ---------------------------------------------------------------------------------------------
# A built dataset, a tiny run, `trm eval --submission` and `trm solve`


class ScoredArcSource(ArcSource):
    """The arc source as its plugin registers it (ArcScoring mixed in)."""


def _scored_arc_plugins(monkeypatch) -> None:
    """`trm run`, `eval` and `solve` see the arc source with its scoring methods."""
    from trm.api import model, training  # where `trm run`, `eval`, `solve` load plugins

    plugin = types.SimpleNamespace()

    @hookimpl
    def register_data_sources():
        return [ScoredArcSource()]

    plugin.register_data_sources = register_data_sources
    for module in (training, model):
        real = module.load_plugins
        monkeypatch.setattr(
            module,
            "load_plugins",
            lambda names, real=real, extra_modules=(), **kw: real(
                names, extra_modules=[*extra_modules, ("arc", plugin)], **kw
            ),
        )


def _prize_files(folder: Path, subset: str, tasks: list[ArcTask]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    challenges = {
        t.task_id: {
            "train": [{"input": i.tolist(), "output": o.tolist()} for i, o in t.train],
            "test": [{"input": i.tolist()} for i, _ in t.test],
        }
        for t in tasks
    }
    solutions = {t.task_id: [o.tolist() for _, o in t.test] for t in tasks}
    (folder / f"arc-agi_{subset}_challenges.json").write_text(json.dumps(challenges))
    (folder / f"arc-agi_{subset}_solutions.json").write_text(json.dumps(solutions))


@pytest.fixture(scope="module")
def arc_data(tmp_path_factory) -> tuple[Path, list[ArcTask]]:
    """A built ARC dataset of 3 training and 2 evaluation tasks (one with two test inputs),
    6 versions each, on an 8x8 canvas."""
    rng = np.random.default_rng(7)
    folder = tmp_path_factory.mktemp("tasks")
    training = [_task(f"trn{n:05d}", rng) for n in range(3)]
    evaluation = [_task("evl00000", rng, tests=2), _task("evl00001", rng)]
    _prize_files(folder, "training", training)
    _prize_files(folder, "evaluation", evaluation)
    out = tmp_path_factory.mktemp("arc") / "data"
    options = ArcBuildOptions(tasks=str(folder), augment=6, side=8)
    ArcSource().build(options, out, 0, lambda _message: None)
    return out, evaluation


def test_a_built_test_split_scores_its_own_labels_perfectly(arc_data):
    out, evaluation = arc_data
    source = ScoredArcSource()
    assert source.primary_metric == "pass@2"
    assert source.evaluator(out, "train") is None
    evaluator = source.evaluator(out, "test")
    index = SplitIndex(open_split(out / "test"))
    rows = index.gather(np.arange(index.num_examples))
    labels = np.where(rows["labels"] == -100, 0, rows["labels"])
    evaluator.add(rows["inputs"], rows["puzzle_identifiers"], labels, np.full(len(labels), 0.5))
    assert evaluator.result()["pass@2"] == 1.0
    assert evaluator.rows_matched == index.num_examples
    assert sorted(evaluator.submission()) == [t.task_id for t in evaluation]


def test_an_arc_dataset_without_its_test_tasks_is_one_error(arc_data, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(arc_data[0], copy)
    (copy / "test_puzzles.json").unlink()
    with pytest.raises(TrmError, match=r"test_puzzles\.json is missing"):
        ScoredArcSource().evaluator(copy, "test")


ARC_SPEC = """\
name = "arc-tiny"

[arch]
hidden_size = 16
expansion = 2.0
num_heads = 2
L_layers = 1
H_cycles = 1
L_cycles = 1
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 16
puzzle_emb_len = 1
halt_max_steps = 2

[train]
global_batch_size = 16
max_steps = 2
lr_warmup_steps = 1
eval_interval = 1
checkpoint_interval_steps = 1

[data]
source = "arc"
dir = "{data}"

[runtime]
device = "cpu"
precision = "fp32"
threads = 1
"""


@pytest.fixture(scope="module")
def arc_run(arc_data, tmp_path_factory):
    """Two steps of a tiny model on the built dataset, evaluated after each."""
    from trm.cli.main import main

    out, _ = arc_data
    folder = tmp_path_factory.mktemp("run")
    spec = folder / "arc-tiny.toml"
    spec.write_text(ARC_SPEC.format(data=out))
    with pytest.MonkeyPatch.context() as monkeypatch:
        _scored_arc_plugins(monkeypatch)
        assert main(["run", str(spec), "--out", str(folder / "run")]) == 0
    return folder / "run"


def test_eval_rows_carry_pass_at_k_and_pass_at_2_picks_the_best(arc_run):
    rows = [json.loads(line) for line in (arc_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r.get("kind") == "eval"]
    assert len(evals) == 2
    for row in evals:
        assert {"exact_accuracy", "cell_accuracy", "pass@1", "pass@2", "pass@1000"} <= set(row)
    summary = json.loads((arc_run / "summary.json").read_text())
    assert summary["best_metric"] == "pass@2"
    assert summary["best_value"] == max(r["pass@2"] for r in evals)


def test_trm_eval_writes_submission_json(arc_run, arc_data, tmp_path, cli, monkeypatch):
    _scored_arc_plugins(monkeypatch)
    target = tmp_path / "submission.json"
    result = cli("eval", arc_run, "--submission", target, "--json")
    assert result.code == 0, result.err
    scores = json.loads(result.out)
    assert 0.0 <= scores["pass@1"] <= scores["pass@2"] <= 1.0
    document = json.loads(target.read_text())
    _, evaluation = arc_data
    assert sorted(document) == [t.task_id for t in evaluation]
    assert [len(document[t.task_id]) for t in evaluation] == [2, 1]
    assert all(set(entry) == {"attempt_1", "attempt_2"} for t in document.values() for entry in t)


def test_a_submission_the_source_cannot_make_is_refused_before_evaluating(
    arc_run, tmp_path, cli, monkeypatch
):
    _scored_arc_plugins(monkeypatch)
    result = cli("eval", arc_run, "--split", "train", "--submission", tmp_path / "s.json")
    assert_one_line_error(result, "no submission format")
    result = cli("eval", arc_run, "--submission", tmp_path / "no" / "s.json")
    assert_one_line_error(result, "does not exist")


def test_trm_solve_shows_attempts_and_writes_a_png(arc_run, arc_data, tmp_path, cli, monkeypatch):
    _scored_arc_plugins(monkeypatch)
    _, evaluation = arc_data
    picture = tmp_path / "task.png"
    result = cli("solve", arc_run, "evl00000", "--png", picture, "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["in_dataset"] is True and document["rows"] == 2 * (1 + 6)
    assert len(document["tests"]) == 2
    for n, test in enumerate(document["tests"]):
        assert test["input"] == evaluation[0].test[n][0].tolist()
        assert test["solution"] == evaluation[0].test[n][1].tolist()
        for a in (1, 2):
            right = test[f"attempt_{a}"] == test["solution"]
            assert test[f"correct_{a}"] is right
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    shown = cli("solve", arc_run, "evl00001", "--png", tmp_path / "b.png")
    assert shown.code == 0, shown.err
    assert "attempt 1" in shown.out and "solution" in shown.out


def test_trm_solve_takes_a_task_file_outside_the_dataset(arc_run, tmp_path, cli, monkeypatch):
    _scored_arc_plugins(monkeypatch)
    task = _task("fresh", np.random.default_rng(11))
    file = tmp_path / "fresh.json"
    file.write_text(
        json.dumps(
            {
                "train": [{"input": i.tolist(), "output": o.tolist()} for i, o in task.train],
                "test": [{"input": i.tolist()} for i, _ in task.test],
            }
        )
    )
    result = cli("solve", arc_run, file, "--png", tmp_path / "f.png", "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["task"] == "fresh" and document["in_dataset"] is False
    assert document["tests"][0]["correct_1"] is None  # no solution given
    unknown = cli("solve", arc_run, "nosuchtask", "--png", tmp_path / "x.png")
    assert_one_line_error(unknown, "nosuchtask", "test tasks")


def test_the_png_holds_the_grid_colours():
    from trm.plugins.tasks.arc import render

    grid = np.array([[0, 1], [4, 9]], dtype=np.uint8)  # no red, green or grey cells
    pixels = render.panel_rows([[(grid, render.frame_colour(True))]])
    data = render.png_bytes(pixels)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])
    assert (height, width) == pixels.shape[:2]
    start = data.index(b"IDAT") + 4
    length = struct.unpack(">I", data[start - 8 : start - 4])[0]
    raw = np.frombuffer(zlib.decompress(data[start : start + length]), dtype=np.uint8)
    rows = raw.reshape(height, 1 + 3 * width)
    assert (rows[:, 0] == 0).all()
    decoded = rows[:, 1:].reshape(height, width, 3)
    np.testing.assert_array_equal(decoded, pixels)
    colours = {tuple(c) for c in decoded.reshape(-1, 3).tolist()}
    assert {tuple(render.PALETTE[c]) for c in (0, 1, 4, 9)} <= colours
    assert render.RIGHT in colours and render.WRONG not in colours


def test_the_best_evaluation_is_judged_by_the_primary_metric():
    from trm.evaluation.task_evaluation import record_best

    state = types.SimpleNamespace(
        best_metric="exact_accuracy", best_value=0.0, best_exact_accuracy=0.0, best_step=0, step=0
    )
    evaluations = [
        (10, {"exact_accuracy": 0.5, "pass@2": 0.2}),
        (20, {"exact_accuracy": 0.7, "pass@2": 0.1}),  # better exact, worse pass@2
        (30, {"exact_accuracy": 0.4, "pass@2": 0.3}),
    ]
    improved = []
    for step, result in evaluations:
        state.step = step
        improved.append(record_best(state, result, "pass@2"))
    assert improved == [True, False, True]
    assert (state.best_step, state.best_metric, state.best_value) == (30, "pass@2", 0.3)
    assert state.best_exact_accuracy == 0.4
    # a source without the metric in its results falls back to exact accuracy
    state.step = 40
    assert record_best(state, {"exact_accuracy": 0.9}, "pass@2") is True
    assert (state.best_metric, state.best_value) == ("exact_accuracy", 0.9)


def test_an_arc_train_epoch_reads_each_task_once_with_all_its_pairs(arc_data):
    out, _ = arc_data
    index = SplitIndex(open_split(out / "train"))
    sampler = TrainSampler(index, 16, seed=0)
    # 3 training tasks: 3 demonstrations + 1 test pair each; 2 evaluation tasks: 3 each
    assert sampler.epoch_rows == 3 * 4 + 2 * 3
    order = sampler.epoch_order(0)
    runs = _runs_of_one_puzzle(index, order)
    assert len(runs) == index.num_groups == 5
    assert sorted(n for _, n in runs) == [3, 3, 4, 4, 4]


def test_exploration_feeds_each_versions_chosen_answer_to_the_vote(
    arc_run, cli, monkeypatch, tmp_path
):
    _scored_arc_plugins(monkeypatch)
    result = cli("eval", arc_run, "--json", "--explore", "3", "--noise", "0.5")
    assert result.code == 0, result.err
    scores = json.loads(result.out)
    assert 0.0 <= scores["pass@1"] <= scores["pass@2"] <= 1.0
    assert scores["trajectories_per_puzzle"] == 3.0
    assert scores["oracle_exact_accuracy"] >= scores["exact_accuracy"]
    assert "explore@3/q" in scores and "explore@3/vote" in scores
    assert not any(key.endswith("/rules") for key in scores)  # ARC's rules cannot choose
    refused = cli("eval", arc_run, "--explore", "3", "--select", "rules")
    assert_one_line_error(refused, "--select rules", "arc")
    solved = cli(
        "solve", arc_run, "evl00001", "--png", tmp_path / "e.png", "--json", "--explore", "3"
    )
    assert solved.code == 0, solved.err
    assert json.loads(solved.out)["rows"] == 1 + 6
