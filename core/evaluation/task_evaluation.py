"""A run's use of its data source's task evaluator: a fresh one per evaluation (or pooled
across evaluations when ``train.eval_pool`` asks), and the metric that picks the best
checkpoint.

The reference's ARC evaluator pools every evaluation of a run unless reset, so later
evaluations vote with predictions of older weights; trm starts each evaluation empty unless
``train.eval_pool = true``. The pool lives in this process only: a resumed run starts a new
one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import define, field

from trm.data.evaluator import TaskEvaluator
from trm.evaluation.attempts import AttemptPlan
from trm.evaluation.explore import Exploration
from trm.state import TrainState

DEFAULT_PRIMARY_METRIC = "exact_accuracy"


@define
class TaskEvaluation:
    """How a run's evaluations use the source's task evaluator.

    ``make`` builds a fresh evaluator (None: the source has none for this split);
    ``primary_metric`` names the result that picks the best checkpoint; ``pool`` keeps the
    records of each finished evaluation for the next; ``attempts`` tries the answers the
    task's rules refuse again (``train.eval_attempts``; None: one attempt); ``exploration``
    explores each puzzle (``train.eval_explore``; None: one trajectory).
    """

    make: Callable[[], TaskEvaluator | None] | None = None
    primary_metric: str = DEFAULT_PRIMARY_METRIC
    pool: bool = False
    pooled: list[Any] = field(factory=list)
    attempts: AttemptPlan | None = None
    exploration: Exploration | None = None

    def start(self) -> TaskEvaluator | None:
        """The evaluator for one evaluation (with the pool merged in when pooling)."""
        evaluator = self.make() if self.make is not None else None
        if evaluator is not None and self.pool and self.pooled:
            evaluator.merge(list(self.pooled))
        return evaluator

    def finish(self, evaluator: TaskEvaluator | None) -> None:
        """Keep a finished evaluation's records when pooling (a failed attempt is dropped)."""
        if evaluator is not None and self.pool:
            self.pooled = list(evaluator.records())


def task_evaluation(
    source: Any, data_dir: Path, split: str, pool: bool, attempts: AttemptPlan | None = None
) -> TaskEvaluation:
    """The task evaluation of a run on ``data_dir/split`` with data source ``source``."""
    factory = getattr(source, "evaluator", None)
    make = (lambda: factory(data_dir, split)) if callable(factory) else None
    metric = getattr(source, "primary_metric", None) or DEFAULT_PRIMARY_METRIC
    return TaskEvaluation(make=make, primary_metric=str(metric), pool=pool, attempts=attempts)


def record_best(state: TrainState, result: dict[str, float], metric: str) -> bool:
    """Record ``result`` in ``state`` as the best evaluation when its ``metric`` (exact
    accuracy when the result lacks it) beats the best so far, or when there is none yet or
    the best was judged by another metric; returns whether it did."""
    if metric not in result:
        metric = DEFAULT_PRIMARY_METRIC
    value = float(result[metric])
    same_metric = state.best_metric == metric
    if state.best_step != 0 and same_metric and value <= state.best_value:
        return False
    state.best_metric, state.best_value = metric, value
    state.best_exact_accuracy = float(result["exact_accuracy"])
    state.best_step = state.step
    return True
