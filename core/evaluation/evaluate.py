"""Evaluation: run every supervision step on held-out examples and score the answers.

Exact accuracy counts an example right only when every scored cell is right; cell accuracy
is the mean fraction of scored cells that are right. Cells whose label is ignored are not
scored. In evaluation the model never halts early: it runs all ``halt_max_steps`` steps.
:func:`evaluate_in_run` is the loop's evaluation: EMA weights when kept, a smaller batch after
out of memory, the best result tracked, the row written, ``on_eval`` called.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from trm.control import TrainControl
from trm.data.evaluator import TaskEvaluator
from trm.data.sampler import SplitIndex
from trm.device import distributed
from trm.device.contract import Placement
from trm.device.oom import is_out_of_memory
from trm.evaluation.task_evaluation import TaskEvaluation, record_best
from trm.metrics_log import Journal
from trm.model import ACTLoss
from trm.plugin_manager import TrmPluginManager
from trm.state import TrainState

IGNORE_LABEL = -100
TaskMetrics = Callable[[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]


@torch.no_grad()
def run_all_steps(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    halt_max_steps: int,
    placement: Placement,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every supervision step on ``batch`` (model in eval mode): the last step's outputs and,
    per row, the step (1..halt_max_steps) at which the Q head first asked to halt by the
    training rule (``halt_max_steps`` when it never did)."""
    carry = model.initial_carry(batch)
    outputs: dict[str, torch.Tensor] = {}
    halt_steps = torch.full((batch["inputs"].shape[0],), halt_max_steps, device=placement.device)
    with placement.autocast():
        for step in range(1, halt_max_steps + 1):
            carry, outputs = model(carry, batch)
            asks = _asks_to_halt(model, outputs) & (halt_steps == halt_max_steps)
            halt_steps = torch.where(asks, torch.full_like(halt_steps, step), halt_steps)
    return outputs, halt_steps


def predict_with_halt(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    halt_max_steps: int,
    placement: Placement,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's answer tokens [B, seq_len] and its q_halt logits [B] (float32), both after
    all ``halt_max_steps`` supervision steps (model in eval mode)."""
    outputs, _ = run_all_steps(model, batch, halt_max_steps, placement)
    return outputs["logits"].argmax(dim=-1), outputs["q_halt_logits"].float()


def predict(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    halt_max_steps: int,
    placement: Placement,
) -> torch.Tensor:
    """The model's answer tokens [B, seq_len] after all supervision steps (model in eval mode)."""
    return predict_with_halt(model, batch, halt_max_steps, placement)[0]


def confidence(q_halt_logits: torch.Tensor) -> np.ndarray:
    """sigmoid(q_halt) as float64 NumPy (as the reference's ARC evaluator computes it)."""
    return torch.sigmoid(q_halt_logits.detach().cpu().double()).numpy()


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


def _asks_to_halt(model: torch.nn.Module, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per row: would the training rule halt here (``q_halt > 0`` with ``no_ACT_continue``,
    else ``q_halt > q_continue``)?"""
    arch = getattr(model, "arch", None) or model.module.arch  # a wrapper keeps it on .module
    q_halt = outputs["q_halt_logits"]
    if arch.no_ACT_continue:
        return q_halt > 0
    return q_halt > outputs["q_continue_logits"]


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


def evaluate(
    model: torch.nn.Module,
    index: SplitIndex,
    halt_max_steps: int,
    batch_size: int,
    placement: Placement,
    max_examples: int = 0,
    task_metrics: TaskMetrics | None = None,
    task_evaluator: TaskEvaluator | None = None,
) -> dict[str, float]:
    """Exact and cell accuracy over the first ``max_examples`` examples (0 = all) of a split,
    the loss and the Q head's figures (:func:`halting_metrics`), and the task's own metrics
    when its data source has them.

    ``task_metrics(inputs, labels, predictions)`` (a DataSource's optional method) gets a
    batch's token rows as NumPy arrays and returns per-row values in [0, 1] by name (a maze's
    ``valid_path_rate``); each is averaged over the examples. ``task_evaluator`` (from the
    source's optional ``evaluator``) gets every batch with the model's confidence and adds
    its ``result()``. Puts the model in eval mode for the call and restores its previous mode.
    Under data parallelism each rank scores its share of the examples
    (:meth:`trm.device.distributed.World.shard`) and the sums are combined over the ranks,
    so every rank returns the result of the whole set.
    A task evaluator's records are gathered from every rank and merged before ``result()``.

    The scoring and halting sums stay on the device, added batch by batch (the backend's
    ``mark_step`` after each), and are read to the host once, at the end: one host read per
    evaluation. Only ``task_metrics`` and ``task_evaluator``, which take NumPy rows, read each
    batch's predictions (and the confidence).
    """
    total = index.num_examples if max_examples <= 0 else min(max_examples, index.num_examples)
    share = distributed.current().shard(total)  # range(total) with one process
    was_training = model.training
    model.eval()
    task_sums: dict[str, float] = {}
    totals = torch.zeros(len(EVAL_SUM_KEYS), device=placement.device)
    try:
        for start in range(share.start, share.stop, batch_size):
            examples = np.arange(start, min(share.stop, start + batch_size))
            rows = index.gather(examples)
            batch = placement.to_device(rows)
            outputs, halt_steps = run_all_steps(model, batch, halt_max_steps, placement)
            preds = outputs["logits"].argmax(dim=-1)
            q_halt = outputs["q_halt_logits"].float()
            labels = batch["labels"]
            totals = totals + torch.cat(
                [score_sums(preds, labels), halting_sums(model, outputs, halt_steps, labels)]
            )
            placement.mark_step()  # a lazy device runs this batch here, not all at the end
            if task_metrics is not None:
                values = task_metrics(rows["inputs"], rows["labels"], preds.cpu().numpy())
                for name, per_row in values.items():
                    task_sums[name] = task_sums.get(name, 0.0) + float(np.sum(per_row))
            if task_evaluator is not None:
                task_evaluator.add(
                    rows["inputs"],
                    rows["puzzle_identifiers"],
                    preds.cpu().numpy(),
                    confidence(q_halt),
                )
        sums = dict(zip(EVAL_SUM_KEYS, placement.backend.read_values(totals), strict=True))
    finally:
        model.train(was_training)
    n_scored, n_exact, cell_sum, task_sums = _sum_over_ranks(
        int(sums["scored"]), int(sums["exact"]), sums["cells"], task_sums
    )
    halting = {key: sums[key] for key in EVAL_SUM_KEYS[3:]}
    halting = _sum_over_ranks(0, 0, 0.0, halting)[3]
    if task_evaluator is not None:
        _merge_over_ranks(task_evaluator)
    examples_done = max(total, 1)
    return {
        "examples": n_scored,
        "exact_accuracy": n_exact / max(n_scored, 1),
        "cell_accuracy": cell_sum / max(n_scored, 1),
        **halting_metrics(halting),
        **{name: value / examples_done for name, value in task_sums.items()},
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
            extra = (spec.train.eval_max_examples, task_metrics, evaluator)
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
