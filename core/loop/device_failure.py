"""A device that fails mid-run, and a run continued on another device.

A failure of the device itself — an illegal memory access, a device-side assert, a GPU that
fell off the bus — is not out of memory (:mod:`~trm.loop.oom_retry` handles that) and cannot
be retried: the device's state is gone. PyTorch raises ``torch.AcceleratorError`` for every
such error of an accelerator's API (CUDA, HIP, XPU, MPS; PyTorch >= 2.8), so the loop
recognises it by type, with no branch on the device kind. The run stops without a checkpoint
(the weights may be damaged): the last good checkpoint is the one written before, and the
message says how to continue — on the same device, or on another with
``--set runtime.device=…``.

When a run resumes on another device than the one that wrote its checkpoint,
:func:`device_change_line` says so in one line: the checkpoint is read onto the host and every
tensor (weights, optimizer states, EMA, the carry) moves to the new device; the accelerator's
RNG states cannot be restored on another kind of device, so the halting-exploration draws
differ from the original run's.
"""

from __future__ import annotations

from typing import Any

import torch

from trm.errors import TrainingFailed
from trm.state import TrainState, last_good

MAX_DETAIL_CHARS = 200


class DeviceFailed(TrainingFailed):
    """The device failed mid-run (not out of memory); the run stopped at its last good
    checkpoint. One line, exit 1 (``trm.cli.main``)."""


def is_device_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure of the device itself: ``torch.AcceleratorError`` (an
    accelerator API error; out of memory is ``torch.OutOfMemoryError``, never this type)."""
    accelerator_error = getattr(torch, "AcceleratorError", None)
    return accelerator_error is not None and isinstance(exc, accelerator_error)


def device_failure(exc: BaseException, state: TrainState | None, device: str) -> DeviceFailed:
    """The one-line failure to raise for ``exc`` on ``device`` (``state``: the run's state,
    None when the failure came before it was built)."""
    text = str(exc).strip()
    detail = text.splitlines()[0].strip() if text else type(exc).__name__
    if len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 1] + "…"
    when = f"after step {state.step}" if state is not None else "before the first step"
    kept = last_good(state) if state is not None else "no checkpoint of this run was written"
    return DeviceFailed(
        f"the device {device} failed {when} ({detail}); the run stops and {kept} — continue "
        "it with --resume auto, on another device by adding --set runtime.device=cpu (or "
        "another GPU, such as cuda:1)"
    )


def recorded_device(payload: dict[str, Any]) -> str | None:
    """The device a checkpoint was trained on: its ``device`` (``TrainState.state_dict``
    records it), else its spec's ``runtime.device`` when that names one; None: unknown."""
    device = payload.get("device")
    if isinstance(device, str) and device:
        return device
    runtime = (payload.get("spec") or {}).get("runtime") or {}
    named = runtime.get("device")
    return str(named) if named and named != "auto" else None


def device_changed(saved: str, now: torch.device, compare_index: bool) -> bool:
    """Whether a checkpoint trained on ``saved`` resumes on another device than ``now``:
    another kind, or (``compare_index``: one process) another index of the same kind
    (a device named without an index is index 0). Under torchrun every rank has its own
    device, so only the kind counts.
    """
    old, new = torch.device(saved), torch.device(now)
    if old.type != new.type:
        return True
    return compare_index and (old.index or 0) != (new.index or 0)


def same_device_kind(saved: str, now: torch.device | str) -> bool:
    """Whether ``saved`` and ``now`` are the same kind of device (cuda:0 and cuda:1 are)."""
    return torch.device(saved).type == torch.device(now).type


def device_change_line(saved: str, now: torch.device, step: int, carry_rows: int | None) -> str:
    """The one line a resume on another device than ``saved`` prints: the device change,
    what happened to the carry, and what happened to the RNG."""
    here = str(now)
    carry = (
        f"the carry ({carry_rows} rows of z_H and z_L) was moved to {here}"
        if carry_rows is not None
        else "there was no carry to move"
    )
    if same_device_kind(saved, now):
        rng = "the RNG states were restored as recorded"
    else:
        kind = torch.device(saved).type
        rng = (
            f"{kind}'s RNG states cannot be restored on {torch.device(now).type}, so the "
            "halting-exploration draws differ from the original run's (Python's, NumPy's and "
            "torch's CPU generators are restored)"
        )
    return (
        f"device changed: the checkpoint of step {step} was trained on {saved}, this run "
        f"trains on {here}: {carry}; {rng}"
    )
