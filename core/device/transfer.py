"""Moving batches to a device, autocast, and waiting for a device to finish."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import numpy as np
import torch


def to_device(
    batch: Mapping[str, np.ndarray | torch.Tensor], device: torch.device
) -> dict[str, torch.Tensor]:
    """Host arrays (or host tensors) to ``device`` tensors. For CUDA they are first copied into
    pinned (page-locked) host memory, unless a reader pinned them already, so the copies to
    the GPU run asynchronously (non-blocking) and overlap with the GPU's work; on the CPU the
    tensors share the arrays' memory."""
    tensors = {
        k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
        for k, v in batch.items()
    }
    if torch.device(device).type != "cuda":
        return {k: t.to(device) for k, t in tensors.items()}
    pinned = {k: t if t.is_pinned() else t.pin_memory() for k, t in tensors.items()}
    return {k: t.to(device, non_blocking=True) for k, t in pinned.items()}


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """An autocast context for ``dtype``, or a no-op for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def synchronize(device: torch.device | str) -> None:
    """Wait until ``device`` has finished its queued work (a no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
