"""Evaluation: run every supervision step on held-out examples and score the answers.

Exact accuracy counts an example right only when every scored cell is right; cell accuracy
is the mean fraction of scored cells that are right. Cells whose label is ignored are not
scored. In evaluation the model never halts early: it runs all ``halt_max_steps`` steps.
:func:`evaluate_in_run` is the loop's evaluation: EMA weights when kept, a smaller batch after
out of memory, the best result tracked, the row written, ``on_eval`` called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from attrs import frozen

from trm.control import TrainControl
from trm.data.evaluator import TaskEvaluator
from trm.data.sampler import SplitIndex
from trm.device import distributed
from trm.device.contract import Placement
from trm.device.oom import is_out_of_memory
from trm.evaluation.attempts import AttemptPlan, at_attempts_key, try_again
from trm.evaluation.explore import (
    CURVE_PREFIX,
    ORACLE,
    Exploration,
    Explored,
    Explorer,
    curve_sums,
    puzzles_in_batch,
)
from trm.evaluation.steps import (
    IGNORE_LABEL,
    confidence,
    exact_rows,
    predict,
    predict_with_halt,
    run_all_steps,
)
from trm.evaluation.task_evaluation import TaskEvaluation, record_best
from trm.metrics_log import Journal
from trm.model import ACTLoss
from trm.plugin_manager import TrmPluginManager
from trm.state import TrainState

__all__ = [
    "EVAL_SUM_KEYS",
    "IGNORE_LABEL",
    "TaskMetrics",
    "add_halting_sums",
    "confidence",
    "evaluate",
    "evaluate_in_run",
    "exact_rows",
    "halting_metrics",
    "halting_sums",
    "predict",
    "predict_with_halt",
    "puzzle_runner",
    "run_all_steps",
    "score_sums",
]

# The task-sum names of the examples exactly right after the attempts and of the rows the
# model ran (summed over ranks with the task's own sums, then divided by the examples scored).
_RETRIED = "_exact_after_attempts"
_ROWS_RUN = "_rows_run"
TaskMetrics = Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]


def puzzle_runner(
    model: torch.nn.Module, placement: Placement, halt_max_steps: int, batch_size: int
) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The model as :data:`trm.evaluation.attempts.RunPuzzles`: token rows in batches of at
    most ``batch_size``, every supervision step, answers and halting steps as NumPy."""
    return Explorer(Exploration(), placement).puzzle_runner(model, halt_max_steps, batch_size)


# The sums an evaluation adds on the device, in the order of its sums vector: the scoring
# (examples scored, exactly right, the sum of their cell accuracies), then the halting sums.
EVAL_SUM_KEYS = ("scored", "exact", "cells", "loss_sum", "count", "q_halt_correct", "steps")


def score_sums(predictions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(examples scored, examples exactly right, sum of per-example cell accuracy) as a
    float32 device vector: fixed shapes (no boolean-mask indexing), nothing read back."""
    mask = labels != IGNORE_LABEL
    counts = mask.sum(-1)
    correct = ((predictions == labels) & mask).sum(-1)
    scored = counts > 0
    fractions = torch.where(scored, correct.float() / counts.clamp(min=1).float(), 0.0)
    return torch.stack(
        [scored.sum().float(), ((correct == counts) & scored).sum().float(), fractions.sum()]
    )


def halting_sums(
    model: torch.nn.Module,
    outputs: dict[str, torch.Tensor],
    halt_steps: torch.Tensor,
    labels: torch.Tensor,
) -> torch.Tensor:
    """One batch's ACT loss and Q-head sums as a float32 device vector (``loss_sum``,
    ``count``, ``q_halt_correct``, ``steps``): the model's own loss (:class:`~trm.model.ACTLoss`,
    the run's token loss) on the last step's outputs, with every row halted, and
    ``halt_steps`` as the rows' halting steps. Nothing is read back."""
    arch = getattr(model, "arch", None) or model.module.arch
    halted = torch.ones_like(halt_steps, dtype=torch.bool)
    loss_sum, metrics = ACTLoss.compute(outputs, labels, halted, arch.loss, steps=halt_steps)
    values = [loss_sum, *(metrics[key] for key in ("count", "q_halt_correct", "steps"))]
    return torch.stack([value.detach().float() for value in values])


def add_halting_sums(
    sums: dict[str, float],
    model: torch.nn.Module,
    outputs: dict[str, torch.Tensor],
    halt_steps: torch.Tensor,
    labels: torch.Tensor,
) -> None:
    """Add one batch's :func:`halting_sums` to ``sums`` on the host (one read)."""
    values = halting_sums(model, outputs, halt_steps, labels).tolist()
    for key, value in zip(EVAL_SUM_KEYS[3:], values, strict=True):
        sums[key] = sums.get(key, 0.0) + value


def halting_metrics(sums: dict[str, float]) -> dict[str, float]:
    """Per scored example: ``loss`` (the training objective on the last step, without the
    Q-continue term, which evaluation has no target for), ``mean_halt_steps`` (the step at
    which the Q head first asks to halt; evaluation itself runs every step) and
    ``q_halt_accuracy`` (``q_halt >= 0`` agrees with exact correctness at the last step)."""
    count = max(sums.get("count", 0.0), 1.0)
    return {
        "loss": sums.get("loss_sum", 0.0) / count,
        "mean_halt_steps": sums.get("steps", 0.0) / count,
        "q_halt_accuracy": sums.get("q_halt_correct", 0.0) / count,
    }


@frozen
class _Answers:
    """One batch answered: ``predictions`` [B, seq_len] and ``q_halt`` [B] (device tensors)
    of the chosen trajectories; ``outputs`` and ``halt_steps`` those of the plain
    (noise-free) trajectory, for the loss and the Q head's figures; ``explored`` every
    trajectory (None: one trajectory)."""

    predictions: torch.Tensor
    q_halt: torch.Tensor
    outputs: dict[str, torch.Tensor]
    halt_steps: torch.Tensor
    chosen_halt_steps: torch.Tensor | np.ndarray
    explored: Explored | None

    def chosen_halt_steps_on_host(self) -> np.ndarray:
        """The chosen trajectories' halting steps as NumPy (a device read for a plain run,
        made only when something on the host needs them: evaluation reads the device once)."""
        steps = self.chosen_halt_steps
        return steps.cpu().numpy() if isinstance(steps, torch.Tensor) else steps


def evaluate(
    model: torch.nn.Module,
    index: SplitIndex,
    halt_max_steps: int,
    batch_size: int,
    placement: Placement,
    max_examples: int = 0,
    task_metrics: TaskMetrics | None = None,
    task_evaluator: TaskEvaluator | None = None,
    attempts: AttemptPlan | None = None,
    exploration: Exploration | None = None,
) -> dict[str, float]:
    """Exact and cell accuracy over the first ``max_examples`` examples (0 = all) of a split,
    the loss and the Q head's figures (:func:`halting_metrics`), the task's own metrics
    when its data source has them, and, with more than one attempt or trajectory,
    ``trajectories_per_puzzle`` (the rows the model ran per example: the trajectories, times
    the attempts each needed; 1 without).

    ``task_metrics(inputs, labels, predictions)`` (a DataSource's optional method) gets a
    batch's token rows as NumPy arrays and returns per-row values in [0, 1] by name (a maze's
    ``valid_path_rate``); each is averaged over the examples. ``task_evaluator`` (from the
    source's optional ``evaluator``) gets every batch with the model's confidence and adds
    its ``result()``. Puts the model in eval mode for the call and restores its previous mode.
    Under data parallelism each rank scores its share of the examples
    (:meth:`trm.device.distributed.World.shard`) and the sums are combined over the ranks,
    so every rank returns the result of the whole set.
    A task evaluator's records are gathered from every rank and merged before ``result()``.

    ``attempts`` with more than one attempt (:mod:`trm.evaluation.attempts`) adds
    ``exact_accuracy@K``: the answers the rules refuse tried again under the task's
    symmetries; every other figure is of the first attempt, the puzzles as given.

    ``exploration`` with more than one trajectory (:mod:`trm.evaluation.explore`) answers
    each example with its rule's choice among the trajectories (each attempt explores; the
    task evaluator gets the chosen answers and their confidence), so exact and cell accuracy
    are of the chosen answers; the loss and the Q head's figures stay those of the plain
    trajectory. It adds ``oracle_exact_accuracy`` (an example is right when any trajectory
    is) and, for N = 1, 2, 4, … up to the trajectories, ``explore@N/RULE`` and
    ``explore@N/oracle``: the exact accuracy with each usable rule choosing among the first N.

    The scoring and halting sums stay on the device, added batch by batch (the backend's
    ``mark_step`` after each), and are read to the host once, at the end: one host read per
    evaluation. Only ``task_metrics``, ``task_evaluator``, more than one attempt and
    exploration, which take NumPy rows, read each batch's predictions (and the confidence).
    """
    total = index.num_examples if max_examples <= 0 else min(max_examples, index.num_examples)
    share = distributed.current().shard(total)  # range(total) with one process
    plan = exploration if exploration is not None else Exploration()
    explorer = Explorer(plan, placement)
    task_sums: dict[str, float] = {}
    totals = torch.zeros(len(EVAL_SUM_KEYS), device=placement.device)
    with _eval_mode(model):
        for examples in _batches(share, puzzles_in_batch(batch_size, plan.trajectories)):
            rows = index.gather(examples)
            batch = placement.to_device(rows)
            answered = _answer(model, batch, halt_max_steps, explorer)
            totals = totals + _device_sums(model, answered, batch["labels"])
            placement.mark_step()  # a lazy device runs this batch here, not all at the end
            _add_host_sums(task_sums, rows, answered, task_metrics, plan)
            if attempts is not None and attempts.attempts > 1:
                runner = explorer.puzzle_runner(model, halt_max_steps, batch_size)
                _add_retried(task_sums, attempts, runner, rows, answered)
            if task_evaluator is not None:
                task_evaluator.add(
                    rows["inputs"],
                    rows["puzzle_identifiers"],
                    answered.predictions.cpu().numpy(),
                    confidence(answered.q_halt),
                )
        sums = dict(zip(EVAL_SUM_KEYS, placement.backend.read_values(totals), strict=True))
    if plan.explores or (attempts is not None and attempts.attempts > 1):
        task_sums[_ROWS_RUN] = float(explorer.rows_run)
    return _result(sums, task_sums, total, attempts, task_evaluator)


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode inside the block, its previous mode restored after it."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _batches(share: range, batch_size: int) -> Iterator[np.ndarray]:
    """The example numbers of ``share`` in batches of at most ``batch_size``."""
    for start in range(share.start, share.stop, batch_size):
        yield np.arange(start, min(share.stop, start + batch_size))


def _answer(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    halt_max_steps: int,
    explorer: Explorer,
) -> _Answers:
    """``batch`` through every supervision step: one trajectory as a plain run, or the
    exploration's trajectories and its rule's choices."""
    if not explorer.exploration.explores:
        explorer.rows_run += int(batch["inputs"].shape[0])
        outputs, halt_steps = run_all_steps(model, batch, halt_max_steps, explorer.placement)
        return _Answers(
            predictions=outputs["logits"].argmax(dim=-1),
            q_halt=outputs["q_halt_logits"].float(),
            outputs=outputs,
            halt_steps=halt_steps,
            chosen_halt_steps=halt_steps,
            explored=None,
        )
    explored = explorer.run(model, batch, halt_max_steps)
    device = batch["inputs"].device
    return _Answers(
        predictions=torch.from_numpy(explored.selected).to(device),
        q_halt=torch.from_numpy(explored.selected_q_halt).to(device),
        outputs=explored.outputs,
        halt_steps=explored.first_halt_steps,
        chosen_halt_steps=explored.selected_halt_steps,
        explored=explored,
    )


def _device_sums(model: torch.nn.Module, answered: _Answers, labels: torch.Tensor) -> torch.Tensor:
    """One batch's scoring and halting sums (:data:`EVAL_SUM_KEYS`) as a device vector."""
    return torch.cat(
        [
            score_sums(answered.predictions, labels),
            halting_sums(model, answered.outputs, answered.halt_steps, labels),
        ]
    )


def _add_host_sums(
    task_sums: dict[str, float],
    rows: dict[str, np.ndarray],
    answered: _Answers,
    task_metrics: TaskMetrics | None,
    exploration: Exploration,
) -> None:
    """Add one batch's task metrics and, when it explored, its per-N figures to
    ``task_sums``."""
    if task_metrics is not None:
        predictions = answered.predictions.cpu().numpy()
        for name, per_row in task_metrics(rows["inputs"], rows["labels"], predictions).items():
            task_sums[name] = task_sums.get(name, 0.0) + float(np.sum(per_row))
    if answered.explored is not None:
        curve = curve_sums(answered.explored, rows["inputs"], rows["labels"], exploration)
        for name, value in curve.items():
            task_sums[name] = task_sums.get(name, 0.0) + value


def _add_retried(
    task_sums: dict[str, float],
    attempts: AttemptPlan,
    runner: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    rows: dict[str, np.ndarray],
    answered: _Answers,
) -> None:
    """Try the batch's refused answers again (:func:`trm.evaluation.attempts.try_again`)
    and add the examples then exactly right to ``task_sums``."""
    retried = try_again(
        attempts,
        runner,
        rows["inputs"],
        rows["puzzle_identifiers"],
        answered.predictions.cpu().numpy(),
        answered.chosen_halt_steps_on_host(),
    )
    right = exact_rows(retried.answers, rows["labels"])
    task_sums[_RETRIED] = task_sums.get(_RETRIED, 0.0) + float(right.sum())


def _result(
    sums: dict[str, float],
    task_sums: dict[str, float],
    total: int,
    attempts: AttemptPlan | None,
    task_evaluator: TaskEvaluator | None,
) -> dict[str, float]:
    """The figures of an evaluation from its sums, added over the ranks first."""
    n_scored, n_exact, cell_sum, task_sums = _sum_over_ranks(
        int(sums["scored"]), int(sums["exact"]), sums["cells"], task_sums
    )
    halting = {key: sums[key] for key in EVAL_SUM_KEYS[3:]}
    halting = _sum_over_ranks(0, 0, 0.0, halting)[3]
    if task_evaluator is not None:
        _merge_over_ranks(task_evaluator)
    scored = max(n_scored, 1)
    rows_run = task_sums.pop(_ROWS_RUN, None)
    cost = {} if rows_run is None else {"trajectories_per_puzzle": rows_run / max(total, 1)}
    retried = {}
    if _RETRIED in task_sums and attempts is not None:
        retried = {at_attempts_key(attempts.attempts): task_sums.pop(_RETRIED) / scored}
    explored = {k: v / scored for k, v in task_sums.items() if k.startswith(CURVE_PREFIX)}
    own = {k: v for k, v in task_sums.items() if not k.startswith(CURVE_PREFIX)}
    oracle = {}
    if explored:
        largest = max(int(k[len(CURVE_PREFIX) :].split("/")[0]) for k in explored)
        oracle = {"oracle_exact_accuracy": explored[f"{CURVE_PREFIX}{largest}/{ORACLE}"]}
    return {
        "examples": n_scored,
        "exact_accuracy": n_exact / scored,
        **retried,
        **oracle,
        "cell_accuracy": cell_sum / scored,
        **halting_metrics(halting),
        **cost,
        **{name: value / max(total, 1) for name, value in own.items()},
        **explored,
        **(task_evaluator.result() if task_evaluator is not None else {}),
    }


def _sum_over_ranks(
    scored: int, exact: int, cells: float, task_sums: dict[str, float]
) -> tuple[int, int, float, dict[str, float]]:
    """The evaluation sums of every rank added up (unchanged with one process)."""
    everyone = distributed.gather_objects((scored, exact, cells, task_sums))
    if len(everyone) == 1:
        return scored, exact, cells, task_sums
    totals: dict[str, float] = {}
    for _, _, _, sums in everyone:
        for name, value in sums.items():
            totals[name] = totals.get(name, 0.0) + value
    return (
        sum(e[0] for e in everyone),
        sum(e[1] for e in everyone),
        sum(e[2] for e in everyone),
        totals,
    )


def _merge_over_ranks(task_evaluator: TaskEvaluator) -> None:
    """Give ``task_evaluator`` every other rank's records (nothing to do with one process),
    so that each rank's ``result()`` is that of the whole split."""
    everyone = distributed.gather_objects(task_evaluator.records())
    if len(everyone) == 1:
        return
    mine = distributed.current().rank
    for rank, records in enumerate(everyone):
        if rank != mine:
            task_evaluator.merge(records)


def evaluate_in_run(
    state: TrainState,
    index: SplitIndex,
    placement: Placement,
    pm: TrmPluginManager,
    control: TrainControl,
    journal: Journal,
    task_metrics: TaskMetrics | None = None,
    task_evaluation: TaskEvaluation | None = None,
    score_tasks: Callable[[torch.nn.Module, int], dict[str, float]] | None = None,
) -> list[str]:
    """Evaluate the run's model now; returns ``["best"]`` on a new best, else ``[]``.

    ``score_tasks(model, batch_size)`` (a multi-task mix:
    :func:`trm.evaluation.per_task.tasks_scorer`) scores each task apart and all together
    instead of ``index`` as one split.

    Uses the EMA weights when the run keeps them (the puzzle-embedding table stays live, as
    in the reference). Out of memory halves the evaluation batch and tries again. The best
    evaluation is the one with the highest ``task_evaluation.primary_metric`` (exact
    accuracy by default).
    """
    spec, batch_size = state.spec, state.micro_batch_size
    scoring = task_evaluation or TaskEvaluation()
    while True:
        try:
            args = (index, spec.arch.halt_max_steps, batch_size, placement)
            evaluator = scoring.start()
            extra = (
                spec.train.eval_max_examples,
                task_metrics,
                evaluator,
                scoring.attempts,
                scoring.exploration,
            )
            score = evaluate
            if score_tasks is not None:
                args, extra, score = (batch_size,), (), score_tasks
            if state.ema is not None:
                with state.ema.swap_in(state.model):
                    result = score(state.model, *args, *extra)
            else:
                result = score(state.model, *args, *extra)
            scoring.finish(evaluator)
            break
        except Exception as exc:
            if not is_out_of_memory(exc, placement.backend) or batch_size == 1:
                raise
        placement.backend.free_cached_memory(placement.device)
        journal.log(f"out of memory in evaluation: batch {batch_size} -> {batch_size // 2}")
        batch_size //= 2
    state.last_eval = result
    improved = record_best(state, result, scoring.primary_metric)
    record = {"kind": "eval", "step": state.step, **result}
    journal.metrics.write(record)
    pm.hook.on_eval(state=state, metrics=record, control=control)
    return ["best"] if improved else []
