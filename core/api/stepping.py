"""One puzzle's answer after each supervision step: what :meth:`trm.api.model.Model.steps`
yields, so a person (``trm demo``) can watch the model refine its answer.

The steps are those ``trm solve`` runs (the plain trajectory, no noise, all
``halt_max_steps`` of them: :func:`trm.evaluation.steps.each_step`); the last step's answer is
the answer :meth:`Model.solve` returns with its defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs
import numpy as np
import torch

from trm.device.contract import Placement
from trm.evaluation.steps import asks_to_halt, confidence, each_step


@attrs.frozen
class StepAnswer:
    """The answer after supervision step ``step`` (1..``max_steps``).

    ``tokens`` the answer's token row (argmax of each cell's logits), ``cells`` the same one
    character a cell as the source's ``format_cells`` writes them (None when it has none);
    ``q_halt`` the Q head's halting logit and ``halt_score`` its sigmoid (the model's
    confidence that the answer is final); ``asks_to_halt`` whether the training rule would
    halt here; ``changed`` the cells (indexes in reading order) whose token differs from the
    previous step's answer (step 1: from the question); ``valid`` the task's rules' verdict on
    the answer (the source's ``check_answer``, never the model's opinion).
    """

    step: int
    max_steps: int
    tokens: np.ndarray = attrs.field(repr=False, eq=False)
    cells: str | None
    q_halt: float
    halt_score: float
    asks_to_halt: bool
    changed: tuple[int, ...]
    valid: bool

    def document(self) -> dict[str, Any]:
        """The step as JSON: every field, ``tokens`` as a list."""
        return {
            "step": self.step,
            "max_steps": self.max_steps,
            "tokens": self.tokens.tolist(),
            "cells": self.cells,
            "q_halt": self.q_halt,
            "halt_score": self.halt_score,
            "asks_to_halt": self.asks_to_halt,
            "changed": list(self.changed),
            "valid": self.valid,
        }


def step_answers(
    module: torch.nn.Module,
    question: np.ndarray,
    halt_max_steps: int,
    placement: Placement,
    source: Any,
    mixed: tuple[np.ndarray, int, Callable[[np.ndarray], np.ndarray]] | None = None,
) -> Iterator[StepAnswer]:
    """The answers of ``question`` (one token row of the task, run under puzzle identifier 0)
    after each supervision step, one at a time as the model computes them. A mix's model
    takes ``mixed``: the row in the mix's tokens, its puzzle identifier, and the map of an
    answer row back to the task's tokens."""
    row, identifier, decode = np.asarray(question), 0, None
    if mixed is not None:
        row, identifier, decode = mixed
    row = np.asarray(row, dtype=np.int64)[None, :]
    batch = placement.to_device(
        {"inputs": row, "labels": row, "puzzle_identifiers": np.full(1, identifier, np.int64)}
    )
    cells = getattr(source, "format_cells", None)
    previous = np.asarray(question).ravel()
    for step, outputs in each_step(module, batch, halt_max_steps, placement):
        tokens = outputs["logits"].argmax(dim=-1)[0].cpu().numpy().astype(np.int64)
        if decode is not None:
            tokens = decode(tokens)
        q_halt = outputs["q_halt_logits"].float()[0].cpu()
        yield StepAnswer(
            step=step,
            max_steps=halt_max_steps,
            tokens=tokens,
            cells=cells(tokens) if callable(cells) else None,
            q_halt=float(q_halt),
            halt_score=float(confidence(q_halt.reshape(1))[0]),
            asks_to_halt=bool(asks_to_halt(module, outputs)[0]),
            changed=tuple(int(i) for i in np.flatnonzero(tokens != previous)),
            valid=bool(source.check_answer(question, tokens)),
        )
        previous = tokens
