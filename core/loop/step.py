"""One optimizer step: forward and backward over the global batch in micro-batches, then the
update at the learning rate of this update.

A step is all or nothing: the carry is written back only after every micro-batch succeeded,
so a step that fails (out of memory) in its forward or backward can be undone and retried by
:mod:`trm.loop.oom_retry`. Once the update has been issued (the carry written, the optimizers'
step counters advanced, EMA updated) nothing can be undone, so out of memory from then on —
in the update itself, or at the step boundary, where a lazy device (XLA) first runs the whole
step's graph and so reports every allocation that failed in it — ends the run with one line
(TrainingFailed) instead of offering a retry that would take the update twice; the last good
checkpoint stays the one to resume from.

The step never waits for the device until its end: the loss and metric sums of every
micro-batch are added on the device, in one vector, and after the update and the backend's
step boundary (``mark_step``) that vector is copied to the host once — the only host read of a
step, whatever its micro-batch count (tests/test_host_syncs.py counts them). The loss-is-
finite check reads that same copy: a non-finite loss is found after the update, so the run
stops with weights it never saves — the last good checkpoint stays the one to resume from.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from attrs import frozen

from trm.device.contract import Placement
from trm.device.oom import is_out_of_memory
from trm.errors import TrainingFailed
from trm.loop.data_parallel import DataParallel
from trm.model import IGNORE_LABEL_ID, ACTLoss, TinyRecursiveModel, TRMCarry, lr_at_step
from trm.model import candidates as latent_candidates
from trm.state import TrainState, last_good

# The sums a step adds on the device, in the order of its sums vector: the loss, then
# ACTLoss's metric sums (``q_continue_loss`` and ``steps`` are 0 where the model has none).
SUM_KEYS = (
    "loss_sum",
    "count",
    "cell_correct",
    "exact_correct",
    "q_halt_correct",
    "steps",
    "lm_loss",
    "q_halt_loss",
    "q_continue_loss",
)


@frozen
class StepSetup:
    """What every step of a run needs besides the state; fixed for the run.

    ``placement``: the backend, device and autocast dtype. ``parallel`` (None: one process)
    is this rank's share of a data-parallel run: the batch holds its ``rows`` of the global
    batch, and the gradients and sums are all-reduced before the update
    (:mod:`trm.loop.data_parallel`)."""

    placement: Placement
    loss: str
    global_batch: int
    parallel: DataParallel | None = None
    # the tasks of a multi-task mix, in the order of a batch's ``task`` numbers (() otherwise)
    task_names: tuple[str, ...] = ()
    # train.latent_candidates: reasoning states a row, the lowest-loss one trained
    # (trm.model.candidates); 1 is the plain step
    candidates: int = 1

    @property
    def device(self) -> torch.device:
        return self.placement.device


def sums_vector(loss_sum: torch.Tensor, metrics: dict[str, torch.Tensor]) -> torch.Tensor:
    """One micro-batch's loss and metric sums as a float32 vector in :data:`SUM_KEYS` order,
    on the device (no host read)."""
    values = {"loss_sum": loss_sum.detach(), **metrics}
    zero = loss_sum.new_zeros(())
    return torch.stack([values.get(key, zero).detach().float() for key in SUM_KEYS])


# The sums a step adds per task of a mix, after SUM_KEYS (task by task).
TASK_SUM_KEYS = ("count", "cell_correct", "exact_correct")


def task_sums(
    outputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    halted: torch.Tensor,
    task: torch.Tensor,
    tasks: int,
) -> torch.Tensor:
    """Per task of a mix, :data:`TASK_SUM_KEYS` over the halted rows with a label (as
    ACTLoss counts them), as one float32 device vector ``[tasks * 3]``; no host read."""
    with torch.no_grad():
        mask = labels != IGNORE_LABEL_ID
        counts = mask.sum(-1)
        correct = (mask & (outputs["logits"].argmax(-1) == labels)).sum(-1)
        valid = halted & (counts > 0)
        cells = torch.where(valid, correct.float() / counts.clamp_min(1), 0.0)
        exact = (valid & (correct == counts)).float()
        mine = task.view(1, -1) == torch.arange(tasks, device=task.device).view(-1, 1)
        per_task = [(mine & valid).float().sum(-1), (mine * cells).sum(-1), (mine * exact).sum(-1)]
        return torch.stack(per_task, dim=-1).reshape(-1)


def accumulate_gradients(
    model: TinyRecursiveModel,
    carry: TRMCarry,
    batch: dict[str, torch.Tensor],
    *,
    min_halt_steps: torch.Tensor,
    micro_batch_size: int,
    loss: str,
    divisor: int,
    placement: Placement,
    tasks: int = 0,
    candidates: int = 1,
) -> tuple[list[tuple[slice, TRMCarry]], torch.Tensor]:
    """Forward and backward over ``batch`` in micro-batches of ``micro_batch_size`` rows
    (the last one holds the remaining rows when the size does not divide the batch).

    Each micro-batch runs one supervision step on its rows of ``carry`` with its rows of
    ``min_halt_steps``; its loss sum is divided by ``divisor`` (the global batch size) before
    ``backward``, so the gradients accumulated in ``.grad`` (and the puzzle-embedding lookups)
    equal those of one pass over the whole batch. ``carry`` is not modified: the new rows come
    back as ``(rows, new_carry)`` pieces for the caller to write back with ``assign_rows``.
    Returns the pieces and the sums over all rows as a device vector (:func:`sums_vector`,
    then :func:`task_sums` for the ``tasks`` of a mix); nothing is read back to the host.
    With ``candidates`` > 1 each row runs that many reasoning states and the loss is the
    winner's (:func:`trm.model.candidates.forward`; the carry holds them all).
    """
    total = carry.batch_size
    pieces: list[tuple[slice, TRMCarry]] = []
    sums: torch.Tensor | None = None
    for start in range(0, total, micro_batch_size):
        rows = slice(start, min(total, start + micro_batch_size))
        sub_batch = {k: v[rows] for k, v in batch.items()}
        with placement.autocast():
            if candidates > 1:
                new_carry, outputs = latent_candidates.forward(
                    model,
                    carry.index_rows(rows),
                    sub_batch,
                    loss_kind=loss,
                    min_halt_steps=min_halt_steps[rows],
                )
            else:
                new_carry, outputs = model(
                    carry.index_rows(rows), sub_batch, min_halt_steps=min_halt_steps[rows]
                )
        loss_sum, metrics = ACTLoss.compute(
            outputs, new_carry.current_data["labels"], new_carry.halted, loss, steps=new_carry.steps
        )
        (loss_sum / divisor).backward()
        pieces.append((rows, new_carry))
        vector = sums_vector(loss_sum, metrics)
        if tasks:
            data = new_carry.current_data
            by_task = task_sums(outputs, data["labels"], new_carry.halted, data["task"], tasks)
            vector = torch.cat([vector, by_task])
        sums = vector if sums is None else sums + vector
    assert sums is not None, "a step has at least one row"
    return pieces, sums


def attempt_step(
    state: TrainState, batch: dict[str, np.ndarray], setup: StepSetup
) -> dict[str, float]:
    """Run optimizer update number ``state.step + 1`` over ``batch``; returns the sums
    (over the global batch: summed over the ranks under data parallelism), read from the
    device once, after the update.

    Raises the out-of-memory error of a forward or backward untouched (the caller undoes the
    step and retries); raises TrainingFailed for a non-finite loss (found after the update:
    the live weights are then not saved) and for out of memory in the update or at the step
    boundary (``mark_step`` and the host read, where a lazy device runs the step), after
    which the state may be partly updated and cannot be taken back. The learning rate is
    that of update ``k = state.step + 1`` (the first update warms up from ``lr / warmup``),
    as the reference implementation counts.
    """
    model, placement = state.model, setup.placement
    device_batch = placement.to_device(batch)
    min_halt_steps = model.draw_min_halt_steps(setup.global_batch, placement.device)
    if setup.parallel is not None:  # every rank draws the global batch's, then keeps its rows
        min_halt_steps = min_halt_steps[setup.parallel.rows]
    for opt in state.optimizers:
        opt.zero_grad(set_to_none=True)
    pieces, sums = accumulate_gradients(
        model,
        state.carry,
        device_batch,
        min_halt_steps=min_halt_steps,
        micro_batch_size=state.micro_batch_size,
        loss=setup.loss,
        divisor=setup.global_batch,
        placement=placement,
        tasks=len(setup.task_names),
        candidates=setup.candidates,
    )
    if setup.parallel is not None:
        setup.parallel.reduce_step(model, sums)
    for rows, new_carry in pieces:
        state.carry.assign_rows(rows, new_carry)
    del pieces
    update = state.step + 1
    try:
        for opt in state.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr_at_step(
                    update, state.spec.train, state.total_steps, group["base_lr"]
                )
            opt.step()
        if state.ema is not None:
            state.ema.update(model)
    except Exception as exc:
        if not is_out_of_memory(exc, placement.backend):
            raise
        raise TrainingFailed(
            f"step {update}: out of memory while updating the weights, which may now be "
            f"partly updated, so the run stops; {last_good(state)} — resume with a smaller "
            "runtime.micro_batch_size or a smaller model"
        ) from None
    try:
        placement.mark_step()
        values = placement.backend.read_values(sums)  # the step's one host read
    except Exception as exc:
        if not is_out_of_memory(exc, placement.backend):
            raise
        kind = placement.backend.memory_kind(exc)
        raise TrainingFailed(
            f"step {update}: out of memory on the {kind} while the device ran the step, "
            "after its update was issued (the carry, the optimizers' step counts and EMA may "
            f"be partly updated), so the step cannot be retried and the run stops; "
            f"{last_good(state)} — resume with a smaller runtime.micro_batch_size or a "
            "smaller model"
        ) from None
    result = dict(zip(SUM_KEYS, values[: len(SUM_KEYS)], strict=True))
    by_task = values[len(SUM_KEYS) :]
    for k, name in enumerate(setup.task_names):
        for j, key in enumerate(TASK_SUM_KEYS):
            result[f"{key}/{name}"] = by_task[k * len(TASK_SUM_KEYS) + j]
    if not math.isfinite(result["loss_sum"]):
        raise TrainingFailed(
            f"step {update}: the loss is not finite ({result['loss_sum']}); the run "
            f"stops and {last_good(state)} — lower train.lr or check the data, then resume"
        )
    result["rows"] = float(setup.global_batch)
    result["lr"] = lr_at_step(update, state.spec.train, state.total_steps)
    return result


def step_record(
    state: TrainState,
    sums: dict[str, float],
    step_s: float,
    host_rss_bytes: int,
    device_peak_mb: float | None,
) -> dict[str, Any]:
    """The metrics.jsonl row of the step just taken.

    The accuracies and ``mean_halt_steps`` are over the rows that halted in this step
    (``halted`` of them; 0 when none did): ``train_q_halt_accuracy`` is the share whose Q head
    (``q_halt >= 0``) agreed with whether the answer was exactly right. A mix's step adds
    ``train_exact_accuracy/NAME``, ``train_cell_accuracy/NAME`` and ``halted/NAME`` per task.
    """
    count = max(sums.get("count", 0.0), 1.0)
    global_batch = state.spec.train.global_batch_size
    by_task: dict[str, Any] = {}
    for key in sums:
        if key.startswith("count/"):
            name = key.removeprefix("count/")
            halted = max(sums[key], 1.0)
            by_task[f"train_exact_accuracy/{name}"] = sums[f"exact_correct/{name}"] / halted
            by_task[f"train_cell_accuracy/{name}"] = sums[f"cell_correct/{name}"] / halted
            by_task[f"halted/{name}"] = int(sums[key])
    return {
        "step": state.step,
        "samples": state.samples,
        "samples_per_s": round(global_batch / max(step_s, 1e-9), 2),
        "loss": sums["loss_sum"] / global_batch,
        "lr": sums["lr"],
        "mem_host_mb": round(host_rss_bytes / 2**20, 1),
        "mem_device_mb": device_peak_mb,
        "train_exact_accuracy": sums.get("exact_correct", 0.0) / count,
        "train_cell_accuracy": sums.get("cell_correct", 0.0) / count,
        "train_q_halt_accuracy": sums.get("q_halt_correct", 0.0) / count,
        "halted": int(sums.get("count", 0.0)),
        "mean_halt_steps": sums.get("steps", 0.0) / count,
        "micro_batch_size": state.micro_batch_size,
        **by_task,
    }
