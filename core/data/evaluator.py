"""Task evaluators and task solving: what a data source adds to scoring and to ``trm solve``
when one example is not the unit of its task.

A task such as ARC judges a *task* from many rows: every augmented version of a test input is
one row, and the answer is chosen by a vote over all of them (pass@K). Such a source gives
the core a :class:`TaskEvaluator` per evaluation (``DataSource.evaluator``, see
:mod:`trm.data.source`), which sees every row of the evaluated split and scores them all at
the end, and may solve one task from many rows for ``trm solve`` (``DataSource.solve_task``,
returning a :class:`TaskSolution`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from attrs import frozen

# ``run(inputs [N, seq_len], puzzle_identifiers [N]) -> (predictions [N, seq_len],
# confidences [N])``: the model's answer tokens for each row after all supervision steps, and
# its confidence sigmoid(q_halt) in [0, 1] (float64), as NumPy arrays.
RunRows = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@runtime_checkable
class TaskEvaluator(Protocol):
    """Scores one evaluation of a split as a whole.

    The core makes a fresh evaluator for each evaluation, calls :meth:`add` for every batch
    of the split in order, then :meth:`result` once. What it accumulates is a plain, picklable
    list of records (:meth:`records`), so evaluations sharded over processes combine: gather
    every process's ``records()`` (e.g. ``gather_objects``), :meth:`merge` the other
    processes' records into one evaluator (or all of them into a fresh one), then call
    :meth:`result` there. Merging is a sum: the order of :meth:`add` and :meth:`merge` calls,
    and how rows were split between processes, never change the result. A run that pools its
    evaluations (``train.eval_pool``) merges the previous evaluation's records into the new
    evaluator before the first :meth:`add`.
    """

    def add(
        self,
        inputs: np.ndarray,
        puzzle_identifiers: np.ndarray,
        predictions: np.ndarray,
        confidences: np.ndarray,
    ) -> None:
        """One batch: input tokens ``[B, seq_len]`` (dataset encoding), puzzle identifiers
        ``[B]``, the model's answer tokens ``[B, seq_len]`` after all ``halt_max_steps``
        supervision steps, and its confidence in each answer, sigmoid(q_halt) ``[B]``."""
        ...

    def records(self) -> list[Any]:
        """Everything accumulated so far, as a list of plain picklable values."""
        ...

    def merge(self, records: list[Any]) -> None:
        """Add records another evaluator's :meth:`records` returned."""
        ...

    def result(self) -> dict[str, float]:
        """The task's scores by name (e.g. ``pass@2``), reported beside exact and cell
        accuracy in eval rows of metrics.jsonl, ``on_eval`` and ``trm eval``."""
        ...

    def submission(self) -> Any:
        """The answers in the task's submission format, a JSON-serialisable document that
        ``trm eval --submission FILE`` writes; None when the task has no such format."""
        ...


@frozen
class TaskSolution:
    """What ``DataSource.solve_task`` returns: ``document`` is what ``trm solve --json``
    prints (JSON-serialisable); ``view`` what the terminal shows (a string or a ``rich``
    renderable); ``picture`` the image file it wrote, if any."""

    document: dict[str, Any]
    view: Any
    picture: Path | None = None
