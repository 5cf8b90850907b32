"""Evaluation: run every supervision step on held-out examples and score the answers.

Exact accuracy counts an example right only when every scored cell is right; cell accuracy
is the mean fraction of scored cells that are right. Cells whose label is ignored are not
scored. In evaluation the model never halts early: it runs all ``halt_max_steps`` steps.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from trm.data.sampler import SplitIndex

IGNORE_LABEL = -100


def to_device(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """Host arrays to ``device`` tensors. For CUDA the arrays are first copied into pinned
    (page-locked) host memory, so the copies to the GPU run asynchronously (non-blocking)
    and overlap with the GPU's work; on the CPU the tensors share the arrays' memory."""
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
    if torch.device(device).type != "cuda":
        return {k: t.to(device) for k, t in tensors.items()}
    return {k: t.pin_memory().to(device, non_blocking=True) for k, t in tensors.items()}


def autocast(device: torch.device, dtype: torch.dtype | None):
    """An autocast context for ``dtype``, or a no-op for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    halt_max_steps: int,
    device: torch.device,
    dtype: torch.dtype | None,
) -> torch.Tensor:
    """The model's answer tokens [B, seq_len] after all supervision steps (model in eval mode)."""
    carry = model.initial_carry(batch)
    outputs = None
    with autocast(device, dtype):
        for _ in range(halt_max_steps):
            carry, outputs = model(carry, batch)
    assert outputs is not None
    return outputs["logits"].argmax(dim=-1)


def score(predictions: torch.Tensor, labels: torch.Tensor) -> tuple[int, int, float]:
    """(examples scored, examples exactly right, sum of per-example cell accuracy)."""
    mask = labels != IGNORE_LABEL
    counts = mask.sum(-1)
    correct = ((predictions == labels) & mask).sum(-1)
    scored = counts > 0
    exact = int(((correct == counts) & scored).sum())
    cells = float((correct[scored].float() / counts[scored].float()).sum())
    return int(scored.sum()), exact, cells


def evaluate(
    model: torch.nn.Module,
    index: SplitIndex,
    halt_max_steps: int,
    batch_size: int,
    device: torch.device,
    dtype: torch.dtype | None,
    max_examples: int = 0,
) -> dict[str, float]:
    """Exact and cell accuracy over the first ``max_examples`` examples (0 = all) of a split.

    Puts the model in eval mode for the call and restores its previous mode.
    """
    total = index.num_examples if max_examples <= 0 else min(max_examples, index.num_examples)
    was_training = model.training
    model.eval()
    n_scored = n_exact = 0
    cell_sum = 0.0
    try:
        for start in range(0, total, batch_size):
            examples = np.arange(start, min(total, start + batch_size))
            batch = to_device(index.gather(examples), device)
            preds = predict(model, batch, halt_max_steps, device, dtype)
            scored, exact, cells = score(preds, batch["labels"])
            n_scored += scored
            n_exact += exact
            cell_sum += cells
    finally:
        model.train(was_training)
    return {
        "examples": n_scored,
        "exact_accuracy": n_exact / max(n_scored, 1),
        "cell_accuracy": cell_sum / max(n_scored, 1),
    }
