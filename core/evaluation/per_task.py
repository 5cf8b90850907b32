"""Evaluating a multi-task mix: each task's held-out examples scored apart, with its own
source's task metrics in its own token encoding, and all tasks together.

A result holds the overall figures under the usual names (``exact_accuracy`` over every
task's examples, ``cell_accuracy``, ``loss``, … weighted by each task's examples) and every
task's figures under ``NAME/TASK`` (``exact_accuracy/sudoku6``, ``valid_path_rate/maze``).
``train.eval_max_examples`` limits each task's examples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from attrs import frozen

from trm.data.mix_layout import MixLayout
from trm.data.sampler import SplitIndex
from trm.device.contract import Placement
from trm.evaluation.evaluate import IGNORE_LABEL, TaskMetrics, evaluate

# the overall figures of a mix's evaluation, each the examples-weighted mean of the tasks'
WEIGHTED = ("exact_accuracy", "cell_accuracy", "loss", "mean_halt_steps", "q_halt_accuracy")


@frozen
class TaskSplit:
    """One task's held-out examples in a mix, and its task metrics (on mixed rows)."""

    name: str
    index: SplitIndex
    task_metrics: TaskMetrics | None = None


def mapped_metrics(layout: MixLayout, name: str, own: TaskMetrics) -> TaskMetrics:
    """Task ``name``'s own metrics, fed its rows in its own encoding (labels keep -100 where
    a cell is not scored)."""

    def metrics(inputs: np.ndarray, labels: np.ndarray, predictions: np.ndarray):
        length = layout.task(name).seq_len
        task_labels = layout.from_mixed(name, labels)
        task_labels = np.where(labels[..., :length] == IGNORE_LABEL, IGNORE_LABEL, task_labels)
        return own(
            layout.from_mixed(name, inputs), task_labels, layout.from_mixed(name, predictions)
        )

    return metrics


def task_splits(
    layout: MixLayout, index: SplitIndex, own_metrics: Mapping[str, TaskMetrics | None]
) -> list[TaskSplit]:
    """The tasks of a mixed split ``index`` (one set per task), with their metrics mapped."""
    splits = []
    for name in layout.names:
        own = own_metrics.get(name)
        splits.append(
            TaskSplit(
                name,
                SplitIndex(index.set_split(name)),
                mapped_metrics(layout, name, own) if own is not None else None,
            )
        )
    return splits


def combine(results: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """The overall figures and every task's (see the module docstring)."""
    total = sum(int(r["examples"]) for r in results.values())
    combined: dict[str, float] = {"examples": total}
    for key in WEIGHTED:
        combined[key] = sum(float(r[key]) * int(r["examples"]) for r in results.values()) / max(
            total, 1
        )
    for name, result in results.items():
        for key, value in result.items():
            combined[f"{key}/{name}"] = value
    return combined


def evaluate_tasks(
    model: torch.nn.Module,
    tasks: list[TaskSplit],
    halt_max_steps: int,
    batch_size: int,
    placement: Placement,
    max_examples: int = 0,
) -> dict[str, float]:
    """:func:`trm.evaluation.evaluate.evaluate` of each task, then :func:`combine`."""
    return combine(
        {
            task.name: evaluate(
                model,
                task.index,
                halt_max_steps,
                batch_size,
                placement,
                max_examples,
                task.task_metrics,
            )
            for task in tasks
        }
    )


def tasks_scorer(
    tasks: list[TaskSplit], halt_max_steps: int, placement: Placement, max_examples: int = 0
) -> Callable[[torch.nn.Module, int], dict[str, float]]:
    """:func:`evaluate_tasks` of ``tasks`` as ``score(model, batch_size)``, the form the
    loop's evaluation takes (``evaluate_in_run``'s ``score_tasks``)."""

    def score(model: torch.nn.Module, batch_size: int) -> dict[str, float]:
        return evaluate_tasks(model, tasks, halt_max_steps, batch_size, placement, max_examples)

    return score
