"""Running a batch through every supervision step, as evaluation and solving do.

In evaluation the model never halts early: it runs all ``halt_max_steps`` steps and the
answer is read after the last; the step at which its Q head first asked to halt (by the
training rule) is recorded beside it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from trm.device.contract import Placement

IGNORE_LABEL = -100


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
    outputs: dict[str, torch.Tensor] = {}
    halt_steps = torch.full((batch["inputs"].shape[0],), halt_max_steps, device=placement.device)
    for step, outputs in each_step(model, batch, halt_max_steps, placement):
        asks = asks_to_halt(model, outputs) & (halt_steps == halt_max_steps)
        halt_steps = torch.where(asks, torch.full_like(halt_steps, step), halt_steps)
    return outputs, halt_steps


def each_step(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    halt_max_steps: int,
    placement: Placement,
) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    """The supervision steps on ``batch`` one at a time (model in eval mode): ``(step,
    outputs)`` for step 1..halt_max_steps, each step's outputs as the model returns them
    (``logits``, ``q_halt_logits``, ...). The recursion is the one :func:`run_all_steps`
    runs; each step runs under no_grad and the placement's autocast, which are left before
    the step is handed out."""
    carry = model.initial_carry(batch)
    for step in range(1, halt_max_steps + 1):
        with torch.no_grad(), placement.autocast():
            carry, outputs = model(carry, batch)
        yield step, outputs


def asks_to_halt(model: torch.nn.Module, outputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per row: would the training rule halt here (``q_halt > 0`` with ``no_ACT_continue``,
    else ``q_halt > q_continue``)?"""
    arch = getattr(model, "arch", None) or model.module.arch  # a wrapper keeps it on .module
    q_halt = outputs["q_halt_logits"]
    if arch.no_ACT_continue:
        return q_halt > 0
    return q_halt > outputs["q_continue_logits"]


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


def exact_rows(predictions: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per row, 1.0 when every scored cell (label not ignored) is right and there is one,
    else 0.0."""
    mask = labels != IGNORE_LABEL
    right = ((predictions == labels) | ~mask).all(axis=-1) & mask.any(axis=-1)
    return right.astype(np.float64)


def confidence(q_halt_logits: torch.Tensor | np.ndarray) -> np.ndarray:
    """sigmoid(q_halt) as float64 NumPy (as the reference's ARC evaluator computes it)."""
    if isinstance(q_halt_logits, np.ndarray):
        q_halt_logits = torch.from_numpy(q_halt_logits)
    return torch.sigmoid(q_halt_logits.detach().cpu().double()).numpy()
