"""ARC's task evaluator: votes over augmented versions, pass@K, ARC Prize's submission.json.

Each row of the test split is one augmented version (dihedral ``k``, colour map) of one test
input of a task; ``identifiers.json`` names the version (see :mod:`trm.plugins.tasks.arc.grids`).
For every row the evaluator

1. crops the model's answer and the row's input to their grids (:func:`grids.decode`: the
   largest top-left rectangle of colour tokens, as the reference's crop),
2. undoes the augmentation (:func:`grids.unaugment`: inverse dihedral, inverse colours),
3. finds which test input of the task the un-augmented input is (by :func:`grids.grid_key`
   against ``test_puzzles.json``), and
4. counts the un-augmented answer as one vote for that candidate, adding its confidence
   sigmoid(q_halt) after all supervision steps.

Candidates of a test input are ranked by (votes, mean confidence), highest first. Two
choices are the :class:`VoteRules` in force; the default, :data:`REFERENCE_RULES`, is the
reference's evaluators/arc.py, so a published pass@K is reproduced exactly:

- an exact tie (equal votes and equal mean confidence) keeps the order in which the
  candidates first arrived (the reference's stable sort; under data parallelism, rank 0's
  rows first, as the reference gathers them);
- an answer whose top-left cell is not a colour crops to the empty 0x0 grid, which is voted
  for like any other answer.

:data:`TRM_RULES` (``rules="trm"``, trm's rule before it followed the reference) breaks an
exact tie by the grid's bytes, so the ranking never depends on the order rows arrived in or
how they were split between processes, and counts no candidate for an answer that crops to
nothing. ``pass@K`` counts a test input solved when the true output is among its top K
candidates; a task's score is the fraction of its test inputs solved, and ``pass@K`` is the
mean over the tasks whose test outputs are known (a task with no rows evaluated scores 0, so
a partial evaluation, ``eval_max_examples``, scores low).

Rows whose input matches no test input of a task in ``test_puzzles.json`` (another split,
another dataset) are ignored. ``submission()`` is ARC Prize's layout — ``{task_id:
[{"attempt_1": grid, "attempt_2": grid}, ...]}``, one entry per test input in order, the two
best candidates (the first repeated when there is one; ``[[0]]`` when there is none, where
the reference leaves the entry out).

The state is a dict of vote counts; :meth:`ArcEvaluator.records` flattens it into plain
tuples ``(task_id, test_index, candidate, votes, confidence_sum)`` (``candidate`` is
:func:`candidate_key`'s bytes) that another evaluator :meth:`~ArcEvaluator.merge`\\ s by
adding — how rows were sharded over processes never changes the result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from attrs import frozen

from trm.data.puzzle_dataset import read_identifiers
from trm.errors import TrmError
from trm.plugins.tasks.arc import grids
from trm.plugins.tasks.arc.tasks import ArcTask, parse_task

TEST_PUZZLES_FILE = "test_puzzles.json"
# pass@K reported for these K (the reference's list); pass@2 is ARC Prize's score.
PASS_KS = (1, 2, 5, 10, 100, 1000)
PRIMARY_METRIC = "pass@2"
ATTEMPTS = 2
# The grid both attempts hold when a test input got no candidate at all.
NO_ANSWER = [[0]]


@frozen
class VoteRules:
    """How the vote ranks exact ties and treats an answer that crops to no grid.

    ``ties``: "arrival" (first arrived first: a stable sort, the reference's) or "grid" (by
    the grid's bytes); ``empty_answer``: "vote" (for the 0x0 grid, the reference's) or
    "skip" (no candidate)."""

    name: str
    ties: str
    empty_answer: str


REFERENCE_RULES = VoteRules("reference", ties="arrival", empty_answer="vote")
TRM_RULES = VoteRules("trm", ties="grid", empty_answer="skip")
VOTE_RULES = {rules.name: rules for rules in (REFERENCE_RULES, TRM_RULES)}
EMPTY_GRID = np.zeros((0, 0), dtype=np.uint8)


def candidate_key(grid: np.ndarray) -> bytes:
    """A grid as bytes that give it back (:func:`candidate_grid`): height, width, cells."""
    grid = np.ascontiguousarray(grid, dtype=np.uint8)
    return bytes(grid.shape) + grid.tobytes()


def candidate_grid(key: bytes) -> np.ndarray:
    """The grid :func:`candidate_key` made ``key`` from."""
    h, w = key[0], key[1]
    return np.frombuffer(key[2:], dtype=np.uint8).reshape(h, w).copy()


@frozen
class Candidate:
    """One distinct answer to a test input: its grid, votes and mean confidence."""

    grid: np.ndarray
    votes: int
    confidence: float


class ArcTestSet:
    """What scoring needs of a dataset: identifier names and the original test tasks.

    ``names[i]`` is the augmented name of puzzle identifier ``i``; ``tasks`` the tasks of
    ``test_puzzles.json`` (ARC Prize layout, outputs included when known) in file order.
    """

    def __init__(self, names: Sequence[str], tasks: Sequence[ArcTask]) -> None:
        self.names = names
        self.tasks = {task.task_id: task for task in tasks}
        self._inputs: dict[str, dict[bytes, list[int]]] = {}
        for task in tasks:
            where = self._inputs.setdefault(task.task_id, {})
            for n, (grid_in, _) in enumerate(task.test):
                where.setdefault(grids.grid_key(grid_in), []).append(n)
        self._parsed: dict[int, tuple[str, int, np.ndarray] | None] = {}

    @classmethod
    def from_dataset(cls, data_dir: Path) -> ArcTestSet:
        """Read ``data_dir/identifiers.json`` and ``data_dir/test_puzzles.json``; TrmError when
        either is missing or malformed."""
        names = read_identifiers(data_dir)
        tasks = read_test_puzzles(data_dir / TEST_PUZZLES_FILE)
        named = {name.split(grids.SEPARATOR, 1)[0] for name in names}
        unnamed = [task.task_id for task in tasks if task.task_id not in named]
        if unnamed:
            raise TrmError(
                f"{data_dir / 'identifiers.json'} names no version of {len(unnamed)} of the "
                f"{len(tasks)} tasks of {TEST_PUZZLES_FILE} (first: {unnamed[0]}); it does "
                "not belong to this dataset: rebuild the dataset"
            )
        return cls(names, tasks)

    def version(self, identifier: int) -> tuple[str, int, np.ndarray] | None:
        """``(task_id, k, colour_map)`` of a puzzle identifier; None for one out of range or
        whose name is not an ARC version name (the blank identifier)."""
        if identifier not in self._parsed:
            parsed = None
            if 0 <= identifier < len(self.names):
                try:
                    parsed = grids.parse_name(self.names[identifier])
                except ValueError:
                    parsed = None
            self._parsed[identifier] = parsed
        return self._parsed[identifier]

    def test_inputs(self, task_id: str, grid: np.ndarray) -> list[int]:
        """Which test inputs of ``task_id`` equal ``grid`` (un-augmented); [] when none."""
        return self._inputs.get(task_id, {}).get(grids.grid_key(grid), [])


def read_test_puzzles(path: Path) -> list[ArcTask]:
    """The tasks of a ``test_puzzles.json`` (``{task_id: {"train": [...], "test": [...]}}``);
    TrmError naming the file when it is missing or malformed."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrmError(
            f"{path} is missing; ARC scoring needs the test tasks `trm data build arc` writes "
            "there (rebuild the dataset)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else exc
        raise TrmError(f"{path} cannot be read as JSON ({reason}); rebuild the dataset") from None
    if not isinstance(document, dict):
        raise TrmError(f"{path} must map task ids to tasks; rebuild the dataset")
    return [
        parse_task(str(task_id), task, f"{path}: {task_id}") for task_id, task in document.items()
    ]


class ArcEvaluator:
    """ARC's :class:`trm.data.evaluator.TaskEvaluator` (see the module docstring).

    Accumulated state is plain records (:meth:`records`, :meth:`merge`): evaluations sharded
    over processes gather each process's records and merge them into one evaluator before
    :meth:`result`.
    """

    def __init__(
        self,
        test_set: ArcTestSet,
        pass_ks: Sequence[int] = PASS_KS,
        rules: VoteRules | str = REFERENCE_RULES,
    ) -> None:
        self.test_set = test_set
        self.pass_ks = tuple(pass_ks)
        if isinstance(rules, str):
            if rules not in VOTE_RULES:
                raise TrmError(f"ARC vote rules {rules!r}: choose one of {', '.join(VOTE_RULES)}")
            rules = VOTE_RULES[rules]
        self.rules = rules
        # (task_id, test index) -> candidate key -> [votes, confidence sum]
        self._votes: dict[tuple[str, int], dict[bytes, list[float]]] = {}
        self.rows_seen = 0
        self.rows_matched = 0

    def add(
        self,
        inputs: np.ndarray,
        puzzle_identifiers: np.ndarray,
        predictions: np.ndarray,
        confidences: np.ndarray,
    ) -> None:
        """Count one batch's answers as votes (rows that are no test input are skipped)."""
        for tokens_in, identifier, tokens_out, conf in zip(
            np.asarray(inputs),
            np.asarray(puzzle_identifiers).reshape(-1),
            np.asarray(predictions),
            np.asarray(confidences, dtype=np.float64).reshape(-1),
            strict=True,
        ):
            self.rows_seen += 1
            version = self.test_set.version(int(identifier))
            if version is None:
                continue
            task_id, k, colour_map = version
            grid_in = grids.decode(tokens_in)
            if grid_in is None:
                continue
            tests = self.test_set.test_inputs(task_id, grids.unaugment(grid_in, k, colour_map))
            if not tests:
                continue
            self.rows_matched += 1
            answer = grids.decode(tokens_out)
            if answer is None and self.rules.empty_answer == "skip":
                continue
            key = candidate_key(
                EMPTY_GRID if answer is None else grids.unaugment(answer, k, colour_map)
            )
            for n in tests:
                self._vote(task_id, n, key, 1, float(conf))

    def _vote(self, task_id: str, test: int, key: bytes, votes: int, confidence: float) -> None:
        tally = self._votes.setdefault((task_id, test), {}).setdefault(key, [0, 0.0])
        tally[0] += votes
        tally[1] += confidence

    def records(self) -> list[tuple[str, int, bytes, int, float]]:
        """``(task_id, test_index, candidate key, votes, confidence sum)`` per candidate."""
        return [
            (task_id, test, key, int(votes), float(total))
            for (task_id, test), tallies in self._votes.items()
            for key, (votes, total) in tallies.items()
        ]

    def merge(self, records: list[tuple[str, int, bytes, int, float]]) -> None:
        """Add another evaluator's :meth:`records`."""
        for task_id, test, key, votes, total in records:
            self._vote(str(task_id), int(test), bytes(key), int(votes), float(total))

    def candidates(self, task_id: str, test: int) -> list[Candidate]:
        """The candidates of test input ``test`` of ``task_id``, best first: most votes,
        then highest mean confidence, then (an exact tie) as the rules say."""
        tallies = self._votes.get((task_id, test), {})
        return [
            Candidate(candidate_grid(key), int(tallies[key][0]), tallies[key][1] / tallies[key][0])
            for key in self._ranked_keys(task_id, test)
        ]

    def _ranked_keys(self, task_id: str, test: int) -> list[bytes]:
        tallies = self._votes.get((task_id, test), {})
        if self.rules.ties == "grid":
            return sorted(
                tallies, key=lambda k: (-tallies[k][0], -tallies[k][1] / tallies[k][0], k)
            )
        # Python's sort is stable: exact ties keep the order the candidates arrived in
        return sorted(tallies, key=lambda k: (-tallies[k][0], -tallies[k][1] / tallies[k][0]))

    def result(self) -> dict[str, float]:
        """``pass@K`` for each K (see the module docstring); {} when no test output is
        known."""
        scores = np.zeros(len(self.pass_ks))
        scored_tasks = 0
        for task_id, task in self.test_set.tasks.items():
            known = [(n, out) for n, (_, out) in enumerate(task.test) if out is not None]
            if not known:
                continue
            scored_tasks += 1
            solved = np.zeros(len(self.pass_ks))
            for n, out in known:
                ranked = self._ranked_keys(task_id, n)
                truth = candidate_key(out)
                if truth in ranked:
                    solved += np.array([truth in ranked[:k] for k in self.pass_ks])
            scores += solved / len(known)
        if scored_tasks == 0:
            return {}
        return {
            f"pass@{k}": float(s / scored_tasks) for k, s in zip(self.pass_ks, scores, strict=True)
        }

    def attempts(self, task_id: str, test: int) -> list[np.ndarray]:
        """The :data:`ATTEMPTS` grids submitted for a test input (see the module docstring)."""
        best = [candidate_grid(key) for key in self._ranked_keys(task_id, test)[:ATTEMPTS]]
        if not best:
            best = [np.array(NO_ANSWER, dtype=np.uint8)]
        return best + [best[0]] * (ATTEMPTS - len(best))

    def submission(self) -> dict[str, list[dict[str, Any]]]:
        """ARC Prize's submission.json document for every task of the test set."""
        return {
            task_id: [
                {
                    f"attempt_{a + 1}": grid.tolist()
                    for a, grid in enumerate(self.attempts(task_id, n))
                }
                for n in range(len(task.test))
            ]
            for task_id, task in self.test_set.tasks.items()
        }
