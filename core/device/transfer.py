"""Moving batches to a device: the helpers backends share."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from trm.device.contract import host_tensors


def pinned_to_device(
    batch: Mapping[str, np.ndarray | torch.Tensor], device: torch.device
) -> dict[str, torch.Tensor]:
    """Host arrays to ``device`` through pinned (page-locked) host memory, unless a reader
    pinned them already, so the copies run asynchronously (non-blocking) and overlap with the
    device's work. For backends whose device has a copy engine (CUDA)."""
    tensors = host_tensors(batch)
    pinned = {k: t if t.is_pinned() else t.pin_memory() for k, t in tensors.items()}
    return {k: t.to(device, non_blocking=True) for k, t in pinned.items()}
