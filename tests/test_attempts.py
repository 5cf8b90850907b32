"""Answers tried again when the task's rules refuse them (trm.evaluation.attempts), with a stub
model: one attempt is the plain answer; a puzzle the model fails as given but solves under a
symmetry is retried and accepted; only the refused puzzles are run again; when no attempt is
accepted the answer is the cell-wise majority, judged by the rules; the symmetries come from
the seed; bad attempt counts are one-line errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from trm.errors import TrmError
from trm.evaluation.attempts import majority, plan_attempts, try_again
from trm.plugins.tasks.sudoku import grid
from trm.plugins.tasks.sudoku.generator import generate_many
from trm.plugins.tasks.sudoku.solver import solve
from trm.plugins.tasks.sudoku.source import SudokuSource

SUDOKU = SudokuSource()


def _puzzles(count: int) -> tuple[np.ndarray, np.ndarray]:
    questions, solutions = generate_many(count, 4, 6, seed=4, workers=1)
    return grid.encode(questions).astype(np.int64), grid.encode(solutions).astype(np.int64)


def _solution_of(question: np.ndarray) -> np.ndarray:
    """The solution tokens of a 4x4 puzzle's tokens (the task's own solver)."""
    return grid.encode(solve(grid.decode(question), limit=1).solution).astype(np.int64)


def _broken(row: np.ndarray) -> np.ndarray:
    """A wrong answer: the first two cells swapped into a clash (digit tokens kept)."""
    broken = row.copy()
    broken[1] = broken[0]
    return broken


class _FailsAsGiven:
    """A stub model: a broken answer to each puzzle it was first shown (``given``), the true
    solution of anything else (the same puzzles moved by a symmetry). Keeps every call."""

    def __init__(self, given: np.ndarray) -> None:
        self.given = {row.tobytes() for row in given}
        self.calls: list[np.ndarray] = []

    def __call__(self, inputs: np.ndarray, identifiers: np.ndarray):
        self.calls.append(inputs.copy())
        answers = []
        for row in inputs:
            solution = _solution_of(row)
            answers.append(_broken(solution) if row.tobytes() in self.given else solution)
        return np.stack(answers), np.full(len(inputs), 3)


def test_one_attempt_returns_the_answers_as_given_and_runs_nothing():
    questions, solutions = _puzzles(4)
    first = np.stack([_broken(s) for s in solutions[:2]] + list(solutions[2:]))
    run = _FailsAsGiven(questions)
    plan = plan_attempts(SUDOKU, 16, 1, 0, "--attempts")
    tried = try_again(plan, run, questions, np.zeros(4, np.int64), first, np.full(4, 2))
    assert np.array_equal(tried.answers, first) and run.calls == []
    assert tried.valid.tolist() == [False, False, True, True]
    assert tried.attempt.tolist() == [0, 0, 1, 1]


def test_a_puzzle_failed_as_given_but_solved_under_a_symmetry_is_retried_and_accepted():
    questions, solutions = _puzzles(6)
    run = _FailsAsGiven(questions[:3])  # the last three are answered right first time
    first, steps = run(questions, np.zeros(6, np.int64))
    run.calls.clear()
    plan = plan_attempts(SUDOKU, 16, 8, 0, "--attempts")
    tried = try_again(plan, run, questions, np.zeros(6, np.int64), first, steps)
    assert np.array_equal(tried.answers, solutions)  # mapped back to the puzzles as given
    assert tried.valid.all()
    assert tried.attempt.tolist() == [2, 2, 2, 1, 1, 1]
    (moved,) = run.calls  # one more run, of the three refused puzzles only
    assert np.array_equal(moved, plan.symmetries[0].forward(questions[:3]))


def test_when_no_attempt_is_accepted_the_majority_is_returned_marked_invalid():
    questions, _ = _puzzles(2)

    def blanks(inputs: np.ndarray, _identifiers) -> tuple[np.ndarray, np.ndarray]:
        """Every cell left blank (the blank token maps to itself under every symmetry)."""
        answers = np.full_like(inputs, grid.BLANK_TOKEN)
        answers[:, 0] = inputs[:, 0]
        return answers, np.full(len(inputs), 1)

    first, steps = blanks(questions, None)
    plan = plan_attempts(SUDOKU, 16, 5, 0, "--attempts")
    tried = try_again(plan, blanks, questions, np.zeros(2, np.int64), first, steps)
    assert tried.attempt.tolist() == [0, 0] and tried.valid.tolist() == [False, False]
    votes = [first] + [s.inverse(blanks(s.forward(questions), None)[0]) for s in plan.symmetries]
    assert np.array_equal(tried.answers, majority(np.stack(votes)))


def test_a_majority_that_obeys_the_rules_is_judged_by_them_not_marked_invalid():
    """Each attempt breaks another cell of the puzzle as given (the clash is made in the moved
    grid), so no attempt is accepted, yet the cell-wise majority is the solution."""
    questions, solutions = _puzzles(2)

    def always_broken(inputs: np.ndarray, _identifiers) -> tuple[np.ndarray, np.ndarray]:
        return np.stack([_broken(_solution_of(row)) for row in inputs]), np.full(len(inputs), 1)

    first, steps = always_broken(questions, None)
    plan = plan_attempts(SUDOKU, 16, 5, 0, "--attempts")
    tried = try_again(plan, always_broken, questions, np.zeros(2, np.int64), first, steps)
    assert tried.attempt.tolist() == [0, 0]  # no attempt was accepted
    assert np.array_equal(tried.answers, solutions) and tried.valid.all()


def test_the_majority_is_cell_wise_and_ties_go_to_the_earliest_attempt():
    votes = np.array([[[1, 2, 3]], [[4, 2, 6]], [[4, 5, 6]], [[1, 5, 9]]])
    assert majority(votes).tolist() == [[1, 2, 6]]


def test_the_symmetries_and_so_the_answers_are_reproducible_from_the_seed():
    questions, _ = _puzzles(3)

    def answers(seed: int) -> list[list[int]]:
        run = _FailsAsGiven(questions)
        first, steps = run(questions, np.zeros(3, np.int64))
        plan = plan_attempts(SUDOKU, 16, 3, seed, "--attempts")
        try_again(plan, run, questions, np.zeros(3, np.int64), first, steps)
        return [call.tolist() for call in run.calls[1:]]

    assert answers(7) == answers(7)
    assert answers(7) != answers(8)


def test_bad_attempt_counts_and_tasks_without_symmetries_are_one_line_errors():
    with pytest.raises(TrmError, match=r"^--attempts must be at least 1 .*got 0$"):
        plan_attempts(SUDOKU, 16, 0, 0, "--attempts")
    with pytest.raises(TrmError, match="whole number"):
        plan_attempts(SUDOKU, 16, 2.5, 0, "attempts")
    plain = SimpleNamespace(name="plain", check_answer=lambda q, a: True)
    assert plan_attempts(plain, 16, 1, 0, "--attempts").attempts == 1
    with pytest.raises(TrmError, match=r"the plain source has no symmetries.*use --attempts 1"):
        plan_attempts(plain, 16, 2, 0, "--attempts")
    voting = SimpleNamespace(name="arc", check_answer=plain.check_answer, evaluator=lambda: None)
    with pytest.raises(TrmError, match="votes over its own augmented versions"):
        plan_attempts(voting, 16, 3, 0, "train.eval_attempts")
