"""One optimizer step: forward and backward over the global batch in micro-batches, then the
update at the learning rate of this update.

A step is all or nothing: the carry is written back only after every micro-batch succeeded,
so a step that fails (out of memory) can be undone and retried by :mod:`trm.train.oom_retry`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from attrs import frozen

from trm.device.oom import is_out_of_memory
from trm.device.transfer import autocast, to_device
from trm.errors import TrainingFailed
from trm.model import ACTLoss, TinyRecursiveModel, TRMCarry, lr_at_step
from trm.state import TrainState, last_good
from trm.train.data_parallel import DataParallel


@frozen
class StepSetup:
    """What every step of a run needs besides the state; fixed for the run.

    ``parallel`` (None: one process) is this rank's share of a data-parallel run: the batch
    holds its ``rows`` of the global batch, and the gradients and sums are all-reduced
    before the update (:mod:`trm.train.data_parallel`)."""

    device: torch.device
    dtype: torch.dtype | None
    loss: str
    global_batch: int
    parallel: DataParallel | None = None


def accumulate_gradients(
    model: TinyRecursiveModel,
    carry: TRMCarry,
    batch: dict[str, torch.Tensor],
    *,
    min_halt_steps: torch.Tensor,
    micro_batch_size: int,
    loss: str,
    divisor: int,
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> tuple[list[tuple[slice, TRMCarry]], dict[str, float]]:
    """Forward and backward over ``batch`` in micro-batches of ``micro_batch_size`` rows
    (the last one holds the remaining rows when the size does not divide the batch).

    Each micro-batch runs one supervision step on its rows of ``carry`` with its rows of
    ``min_halt_steps``; its loss sum is divided by ``divisor`` (the global batch size) before
    ``backward``, so the gradients accumulated in ``.grad`` (and the puzzle-embedding lookups)
    equal those of one pass over the whole batch. ``carry`` is not modified: the new rows come
    back as ``(rows, new_carry)`` pieces for the caller to write back with ``assign_rows``.
    Returns the pieces and the sums of the loss and the ACT metrics over all rows (``rows``
    counts the rows that ran).
    """
    total = carry.batch_size
    pieces: list[tuple[slice, TRMCarry]] = []
    sums: dict[str, float] = {"loss_sum": 0.0, "rows": 0.0}
    for start in range(0, total, micro_batch_size):
        rows = slice(start, min(total, start + micro_batch_size))
        sub_batch = {k: v[rows] for k, v in batch.items()}
        with autocast(device, dtype):
            new_carry, outputs = model(
                carry.index_rows(rows), sub_batch, min_halt_steps=min_halt_steps[rows]
            )
        loss_sum, metrics = ACTLoss.compute(
            outputs, new_carry.current_data["labels"], new_carry.halted, loss, steps=new_carry.steps
        )
        (loss_sum / divisor).backward()
        pieces.append((rows, new_carry))
        sums["loss_sum"] += float(loss_sum.detach())
        sums["rows"] += rows.stop - rows.start
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + float(value)
    return pieces, sums


def attempt_step(
    state: TrainState, batch: dict[str, np.ndarray], setup: StepSetup
) -> dict[str, float]:
    """Run optimizer update number ``state.step + 1`` over ``batch``; returns the sums
    (over the global batch: summed over the ranks under data parallelism).

    Raises the out-of-memory error of a forward or backward untouched (the caller undoes the
    step and retries); raises TrainingFailed for a non-finite loss and for out of memory in
    the update, after which the weights may be partly updated. The learning rate is that of
    update ``k = state.step + 1`` (the first update warms up from ``lr / warmup``), as the
    reference implementation counts.
    """
    model = state.model
    device_batch = to_device(batch, setup.device)
    min_halt_steps = model.draw_min_halt_steps(setup.global_batch, setup.device)
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
        device=setup.device,
        dtype=setup.dtype,
    )
    if setup.parallel is not None:
        sums = setup.parallel.reduce_step(model, sums)
    if not math.isfinite(sums["loss_sum"]):
        raise TrainingFailed(
            f"step {state.step + 1}: the loss is not finite ({sums['loss_sum']}); the run "
            f"stops and {last_good(state)} — lower train.lr or check the data, then resume"
        )
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
        if not is_out_of_memory(exc):
            raise
        raise TrainingFailed(
            f"step {update}: out of memory while updating the weights, which may now be "
            f"partly updated, so the run stops; {last_good(state)} — resume with a smaller "
            "runtime.micro_batch_size or a smaller model"
        ) from None
    sums["lr"] = lr_at_step(update, state.spec.train, state.total_steps)
    return sums


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
    (``q_halt >= 0``) agreed with whether the answer was exactly right.
    """
    count = max(sums.get("count", 0.0), 1.0)
    global_batch = state.spec.train.global_batch_size
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
    }
