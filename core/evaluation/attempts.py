"""Answers checked by the task's rules, and tried again under the task's symmetries when wrong.

With ``K`` attempts, attempt 1 is the puzzle as given (so one attempt is exactly the plain
answer). Each puzzle whose answer the task's rules refuse (the source's ``check_answer``) is
tried again under the next symmetry (the source's ``answer_symmetries``, drawn once from a
seed, the same for every puzzle: a puzzle's answer does not depend on the others or on the
batching): the puzzle is mapped forward, the model answers it, the answer is mapped back.
The first answer the rules accept is returned; when none is, the cell-wise majority of the
``K`` mapped-back answers (ties go to the earliest attempt's token), which the rules then judge
like any other answer. Only the puzzles still refused are run again, so a model that is right
first time costs one attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from attrs import define, field, frozen

from trm.data.symmetry import CellSymmetry, check_attempts, check_seed, no_symmetries

# (inputs [B, seq_len], puzzle identifiers [B]) -> (answer tokens [B, seq_len], halt steps [B])
RunPuzzles = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
# The name of the exact accuracy of K attempts in evaluation results is this and K
# (exact_accuracy@8).
AT_ATTEMPTS_PREFIX = "exact_accuracy@"


def at_attempts_key(attempts: int) -> str:
    """The result key of exact accuracy with ``attempts`` attempts (``exact_accuracy@8``)."""
    return f"{AT_ATTEMPTS_PREFIX}{attempts}"


@define
class AttemptPlan:
    """``attempts`` tries a puzzle: as given, then under ``symmetries`` (``attempts - 1`` of
    them, in order, drawn from ``seed`` by ``draw(count, rng)`` the first time they are read,
    so a plan whose puzzles are all accepted at once draws nothing); ``check(question,
    answer)`` is the task's rules."""

    attempts: int
    draw: Callable[[int, np.random.Generator], list[CellSymmetry]] = field(repr=False)
    check: Callable[[np.ndarray, np.ndarray], bool]
    seed: int = 0
    _drawn: tuple[CellSymmetry, ...] | None = field(default=None, repr=False, alias="_drawn")

    @property
    def symmetries(self) -> tuple[CellSymmetry, ...]:
        """The ``attempts - 1`` symmetries, drawn on first use."""
        if self._drawn is None:
            count = self.attempts - 1
            self._drawn = tuple(self.draw(count, np.random.default_rng(self.seed)) if count else ())
        return self._drawn


@frozen
class Attempted:
    """The answers after the attempts, one row a puzzle: ``answers`` the tokens returned,
    ``valid`` the rules' verdict on them, ``attempt`` the attempt (1..K) whose answer was
    accepted (0: none was; the answer is the majority), ``halt_steps`` the halting step of the
    returned attempt (attempt 1's for the majority)."""

    answers: np.ndarray
    valid: np.ndarray
    attempt: np.ndarray
    halt_steps: np.ndarray


def plan_attempts(source: Any, seq_len: int, attempts: int, seed: int, where: str) -> AttemptPlan:
    """The attempts of ``source``'s puzzles of ``seq_len`` cells, symmetries drawn from
    ``seed`` when first needed. TrmError naming ``where`` (``--attempts``,
    ``train.eval_attempts``) for fewer than 1 or more than
    :data:`~trm.data.symmetry.MAX_ATTEMPTS`, more than 1 for a task without symmetries for
    this shape (asked of the source for one symmetry now), or a seed that is not a whole
    number of 0 or more (``where``-seed)."""
    check_attempts(source, attempts, where)
    check_seed(seed, f"{where}-seed" if where.startswith("--") else f"{where}_seed")
    draw: Callable[[int, np.random.Generator], list[CellSymmetry]] = _no_draw
    if attempts > 1:
        symmetries = source.answer_symmetries

        def draw(count: int, rng: np.random.Generator) -> list[CellSymmetry]:
            return list(symmetries(seq_len, count, rng))

        if not draw(1, np.random.default_rng(seed)):
            raise no_symmetries(source, attempts, where)
    return AttemptPlan(int(attempts), draw, source.check_answer, int(seed))


def _no_draw(count: int, rng: np.random.Generator) -> list[CellSymmetry]:
    return []


def try_again(
    plan: AttemptPlan,
    run: RunPuzzles,
    inputs: np.ndarray,
    identifiers: np.ndarray,
    answers: np.ndarray,
    halt_steps: np.ndarray,
) -> Attempted:
    """Attempts 2..K for the rows of ``inputs`` whose first ``answers`` (with their
    ``halt_steps``) the rules refuse; ``run`` is the model. See the module docstring."""
    inputs = np.asarray(inputs)
    first = np.asarray(answers)
    rows = inputs.shape[0]
    valid = np.array([bool(plan.check(inputs[i], first[i])) for i in range(rows)], dtype=bool)
    result = first.copy()
    steps = np.asarray(halt_steps).copy()
    attempt = np.where(valid, 1, 0)
    tried = [first]  # every attempt's mapped-back answers; a row not run keeps attempt 1's
    for number, symmetry in enumerate(plan.symmetries, start=2):
        pending = np.flatnonzero(~valid)
        if pending.size == 0:
            break
        mapped, mapped_steps = run(symmetry.forward(inputs[pending]), identifiers[pending])
        back = symmetry.inverse(np.asarray(mapped)).astype(first.dtype)
        answers_now = first.copy()
        answers_now[pending] = back
        tried.append(answers_now)
        for row, answer, step in zip(pending, back, np.asarray(mapped_steps), strict=True):
            if plan.check(inputs[row], answer):
                valid[row], attempt[row] = True, number
                result[row], steps[row] = answer, step
    refused = np.flatnonzero(~valid)
    if refused.size:
        votes = np.stack([answers_now[refused] for answers_now in tried])
        result[refused] = majority(votes)
        for row in refused:
            valid[row] = bool(plan.check(inputs[row], result[row]))
    return Attempted(answers=result, valid=valid, attempt=attempt, halt_steps=steps)


def majority(votes: np.ndarray) -> np.ndarray:
    """The cell-wise most frequent token of ``votes`` ``[attempts, rows, seq_len]``; a tie
    goes to the token of the earliest attempt among the tied."""
    votes = np.asarray(votes)
    counts = (votes[:, None] == votes[None, :]).sum(axis=1)  # [attempts, rows, seq_len]
    best = counts.argmax(axis=0)  # argmax returns the first (earliest) of the tied
    return np.take_along_axis(votes, best[None], axis=0)[0]
