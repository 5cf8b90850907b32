"""What the served page asks of the model: its card, and a puzzle solved step by step.

:func:`page_card` is the page's ``trm-demo.json`` (the solver card's fields the page reads);
:func:`solve_events` turns :meth:`trm.Model.steps` (and, with exploration,
:meth:`trm.Model.solve`'s trajectories) into the JSON events the page shows one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import attrs

from trm.api.model import Model
from trm.api.stepping import StepAnswer
from trm.data.selection import rules_judge_answers
from trm.errors import TrmError
from trm.plugins.demo.vocab import page_encoding

# The most trajectories the page may ask to explore (each runs every step).
MAX_PAGE_TRAJECTORIES = 64
# The largest puzzle text the page may send, in characters (an ARC task file is the largest).
MAX_PUZZLE_CHARS = 1_000_000


def page_card(model: Model, name: str) -> dict[str, Any]:
    """The page's description of ``model``: task, grid, vocab, steps and what it solves."""
    task = model.source.name
    seq_len = model.seq_len
    encoding = page_encoding(model.source, seq_len)
    grid = encoding["grid"]
    manifest = model.manifest
    return {
        "format": "trm-demo",
        "version": 1,
        "solver": "server",
        "task": task,
        "seq_len": seq_len,
        "steps": model.spec.arch.halt_max_steps,
        "grid": grid,
        "vocab": encoding["vocab"],
        "model": {"name": name, "source": str(model.checkpoint)},
        "puzzle": manifest.puzzle
        if manifest is not None
        else f"{grid['rows']}x{grid['cols']} {task} puzzles",
        # a task solved whole (ARC) explores through trm solve's task vote, not on the page
        "explore": model.layout is None and not callable(getattr(model.source, "solve_task", None)),
    }


class PageSolver:
    """The model behind a served page: one solve at a time (requests run on their own
    threads; the model runs one batch at a time)."""

    def __init__(self, model: Model, name: str) -> None:
        self.model = model
        self.card = page_card(model, name)
        self._judged = rules_judge_answers(model.source)
        self._lock = threading.Lock()

    def _verdict(self, valid: bool) -> bool | None:
        """The rules' verdict the page shows: None (the page says the rules cannot judge it)
        for an answer a source that cannot judge answers from the question alone (ARC, whose
        check looks the answer up among known solutions) did not find."""
        return valid if self._judged or valid else None

    def solve_events(self, request: Any) -> Iterator[dict[str, Any]]:
        """The events of one solve, as an iterator that computes each step when asked:
        ``{"kind": "step", ...}`` per supervision step (a
        :class:`trm.api.stepping.StepAnswer`'s document, ``valid`` None where the task's rules
        cannot judge the answer: :meth:`_verdict`), then ``{"kind": "done", ...}`` with
        the step at which the model asked to halt and, when ``request["explore"]`` > 1, the
        trajectories explored. TrmError, raised here before any event, for a request or
        puzzle the model cannot take."""
        puzzle, explore = _read_request(request, self.card["explore"])
        with self._lock:
            steps = self.model.steps(puzzle)  # reads the puzzle: a bad one is refused here
        return self._events(steps, puzzle, explore)

    def _events(
        self, steps: Iterator[StepAnswer], puzzle: str, explore: int
    ) -> Iterator[dict[str, Any]]:
        last: StepAnswer | None = None
        halting: int | None = None
        with self._lock:
            for answer in steps:
                last = answer
                if halting is None and answer.asks_to_halt:
                    halting = answer.step
                yield {
                    "kind": "step",
                    **answer.document(),
                    "valid": self._verdict(answer.valid),
                }
        assert last is not None, "a model runs at least one supervision step"
        done: dict[str, Any] = {
            "kind": "done",
            "halt_step": halting or last.max_steps,
            "valid": self._verdict(last.valid),
            "cells": last.cells,
            "tokens": last.tokens.tolist(),
        }
        if explore > 1:
            with self._lock:
                solution = self.model.solve(puzzle, explore=explore)
            done["explored"] = {
                "trajectories": [attrs.asdict(t) for t in solution.trajectories],
                "tokens": solution.tokens.tolist(),
                "cells": solution.answer_cells,
                "valid": solution.valid,
            }
        yield done


def _read_request(request: Any, can_explore: bool) -> tuple[str, int]:
    """The puzzle text and trajectory count of a solve request; TrmError naming the field."""
    if not isinstance(request, dict):
        raise TrmError('the request must be a JSON object {"puzzle": TEXT, "explore": N}')
    puzzle = request.get("puzzle")
    if not isinstance(puzzle, str) or not puzzle.strip():
        raise TrmError("the puzzle is empty; type or paste one, or draw one")
    if len(puzzle) > MAX_PUZZLE_CHARS:
        raise TrmError(f"the puzzle has {len(puzzle)} characters; at most {MAX_PUZZLE_CHARS}")
    explore = request.get("explore", 1)
    if isinstance(explore, bool) or not isinstance(explore, int):
        raise TrmError(f"explore must be a whole number of trajectories, not {explore!r}")
    if not 1 <= explore <= MAX_PAGE_TRAJECTORIES:
        raise TrmError(f"explore must be 1 to {MAX_PAGE_TRAJECTORIES} trajectories, got {explore}")
    if explore > 1 and not can_explore:
        raise TrmError("a model trained on a mix answers with one trajectory; set explore to 1")
    return puzzle, explore
