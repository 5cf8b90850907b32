"""The answer to one puzzle as ``trm solve`` prints it: :class:`Solution`, built by
:func:`solution_of` from the question, the answer and the data source's own checks.

Both solvers make it: the torch model (:meth:`trm.api.model.Model.solve`) and a format's
solver that runs without torch (:meth:`trm.formats.ModelFormat.solver`, e.g. ONNX), so the
two print the same text and the same JSON for the same answer. NumPy and attrs only: this
module imports no torch.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np


@attrs.frozen
class Trajectory:
    """One trajectory of an explored puzzle: ``halt_step`` the first supervision step at which
    its halting logit said halt (``max_steps`` when it never did), ``q_halt`` that logit after
    the last step, ``chosen`` whether the selection rule picked it, ``valid`` whether its
    answer obeys the task's rules."""

    halt_step: int
    q_halt: float
    chosen: bool
    valid: bool


@attrs.frozen
class Solution:
    """The model's answer to one puzzle.

    ``answer`` is the answer as text in the puzzle's own format (the data source's
    ``format_grid``; ``puzzle`` the question the same way); ``valid`` whether the answer
    obeys the task's rules (the data source's ``check_answer``, never the model's opinion);
    ``steps`` the supervision steps the model used: the first at which its Q head asked to
    halt, or all ``halt_max_steps`` when it never did (the answer is read after all of
    them, as ``trm eval`` scores it); ``max_steps`` that bound; ``solvable`` the data
    source's solver's verdict on the puzzle (None: it cannot say); ``verdicts`` the task's
    own yes/no checks (maze: ``valid_path``); ``task`` the data source's name;
    ``question``/``tokens`` the token rows; ``question_cells``/``answer_cells`` one
    character a cell, as ``parse_puzzle`` reads them (the source's ``format_cells``; None
    when it has none); ``attempts`` the attempts allowed (``solve(attempts=K)``) and
    ``attempt`` the one whose answer is returned (1: the puzzle as given; None: no attempt's
    answer obeyed the rules and the answer is their cell-wise majority); ``trajectories``
    with exploration (``solve(explore=N)``, N > 1) each trajectory of the puzzle as given
    (attempt 1): its halting step, its halting logit and whether it was chosen;
    ``step_tokens`` [steps, seq_len], ``step_q_halt`` [steps] and ``step_cells`` each
    supervision step's answer, halting logit and cells, when the solver kept them (the
    ONNX solver does; None otherwise).
    """

    task: str
    puzzle: str
    answer: str
    valid: bool
    steps: int
    max_steps: int
    solvable: bool | None
    verdicts: dict[str, bool]
    question: np.ndarray = attrs.field(repr=False, eq=False)
    tokens: np.ndarray = attrs.field(repr=False, eq=False)
    question_cells: str | None = None
    answer_cells: str | None = None
    attempts: int = 1
    attempt: int | None = 1
    trajectories: tuple[Trajectory, ...] = ()
    step_tokens: np.ndarray | None = attrs.field(default=None, repr=False, eq=False)
    step_q_halt: np.ndarray | None = attrs.field(default=None, repr=False, eq=False)
    step_cells: tuple[str, ...] | None = None

    def document(self) -> dict[str, Any]:
        """The JSON document ``trm solve --json`` prints: the token rows (``question``,
        ``answer``), the cells a script reads (``question_cells``, ``answer_cells``: one
        character a cell, e.g. Sudoku digits with ``.`` for a blank), the grids as text and
        the verdicts; with more than one attempt allowed, ``attempts`` and ``attempt``; with
        exploration, ``trajectories`` (one object each: ``halt_step``, ``q_halt``,
        ``chosen``, ``valid``)."""
        tried: dict[str, Any] = {}
        if self.attempts > 1:
            tried = {"attempts": self.attempts, "attempt": self.attempt}
        if self.trajectories:
            tried["trajectories"] = [attrs.asdict(t) for t in self.trajectories]
        if self.step_tokens is not None and self.step_q_halt is not None:
            tried["step_answers"] = self.step_tokens.tolist()
            tried["step_answer_cells"] = self.step_cells
            tried["step_q_halt"] = [float(q) for q in self.step_q_halt]
        return {
            "question": self.question.tolist(),
            "answer": self.tokens.tolist(),
            "valid": self.valid,
            "solvable": self.solvable,
            **self.verdicts,
            "steps": self.steps,
            "question_text": self.puzzle,
            "answer_text": self.answer,
            "question_cells": self.question_cells,
            "answer_cells": self.answer_cells,
            **tried,
        }

    def __str__(self) -> str:
        """The text ``trm solve`` prints."""
        lines = ["puzzle:", self.puzzle, "model's answer:", self.answer]
        lines.append("valid solution: " + ("yes" if self.valid else "no"))
        lines += [
            f"{k.replace('_', ' ')}: {'yes' if v else 'no'}" for k, v in self.verdicts.items()
        ]
        if self.attempts > 1:
            lines.append(
                f"attempts: the answer of attempt {self.attempt} of {self.attempts}"
                if self.attempt is not None
                else f"attempts: none of {self.attempts} obeyed the rules; the answer is "
                "their cell-wise majority"
            )
        if self.trajectories:
            chosen = next(i for i, t in enumerate(self.trajectories) if t.chosen)
            right = sum(t.valid for t in self.trajectories)
            lines.append(
                f"explored: {len(self.trajectories)} trajectories, {right} obeying the rules; "
                f"the answer of trajectory {chosen + 1} (halted at step "
                f"{self.trajectories[chosen].halt_step}, Q {self.trajectories[chosen].q_halt:.3f})"
            )
        if self.solvable is False:
            lines.append(
                f"the puzzle has no solution (checked by the {self.task} solver); "
                "the model's answer cannot be valid"
            )
        return "\n".join(lines)


def solution_of(
    source: Any,
    question: np.ndarray,
    answer: np.ndarray,
    steps: int,
    max_steps: int,
    **more: Any,
) -> Solution:
    """The :class:`Solution` of ``answer`` (token row) to ``question`` with the data
    source's verdicts on it: ``check_answer`` (valid), ``task_metrics`` (the task's own
    yes/no checks, e.g. a maze's ``valid_path``), ``is_solvable`` and ``format_cells`` when
    it has them. ``more``: the other fields of :class:`Solution` (attempts, attempt,
    trajectories, and ``step_tokens``/``step_q_halt``: each supervision step's answer row and
    halting logit, whose cells are then written with ``format_cells``)."""
    verdicts: dict[str, bool] = {}
    task_metrics = getattr(source, "task_metrics", None)
    if callable(task_metrics):
        rows = task_metrics(question[None, :], question[None, :], answer[None, :])
        verdicts = {k.removesuffix("_rate"): bool(v[0] >= 1) for k, v in rows.items()}
    check = getattr(source, "is_solvable", None)
    cells = getattr(source, "format_cells", None)
    step_tokens = more.get("step_tokens")
    if step_tokens is not None and callable(cells):
        more["step_cells"] = tuple(cells(row) for row in step_tokens)
    return Solution(
        task=source.name,
        puzzle=source.format_grid(question),
        answer=source.format_grid(answer),
        valid=bool(source.check_answer(question, answer)),
        steps=steps,
        max_steps=max_steps,
        solvable=bool(check(question)) if callable(check) else None,
        verdicts=verdicts,
        question=question,
        tokens=answer,
        question_cells=cells(question) if callable(cells) else None,
        answer_cells=cells(answer) if callable(cells) else None,
        **more,
    )
