"""Every random-number generator a run draws from, captured and restored.

A checkpoint holds them so a resumed run draws what the uninterrupted run would have; an
out-of-memory retry restores them so the retried step draws the same exploration.

The host's generators (Python, NumPy, torch's CPU generator) are always captured. A device's
own generator is the backend's (:meth:`~trm.device.contract.DeviceBackend.rng_state`) and only
this process's device: under torchrun each rank's state is saved with the rank, so a resume on
another number of GPUs, or with fewer visible, never indexes a device that is not there.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from trm.device.contract import DeviceBackend

CAPTURED_KEYS = ("python", "numpy", "torch_cpu", "device")
"""The keys :func:`capture_rng` writes. A checkpoint written before device states were kept
per rank has one more, named for its device type, holding every device's state at once."""


def capture_rng(backend: DeviceBackend | None = None, device: torch.device | None = None) -> dict:
    """Every RNG state a run may draw from, in weights-only-loadable form.

    ``device`` holds ``{"backend": name, "state": tensor}`` when the backend's device has a
    generator of its own, else None.
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    device_state: dict[str, Any] | None = None
    if backend is not None and device is not None:
        tensor = backend.rng_state(device)
        if tensor is not None:
            device_state = {"backend": backend.name, "state": tensor}
    return {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch_cpu": torch.get_rng_state(),
        "device": device_state,
    }


def restore_rng(
    state: dict[str, Any],
    backend: DeviceBackend | None = None,
    device: torch.device | None = None,
) -> str | None:
    """Inverse of :func:`capture_rng`. Returns None when every state was restored, else one
    sentence saying which device state could not be (a checkpoint from another kind of
    device, or one written before device states were kept per rank): the host's generators
    are restored, the device's start from its seed, so exploration draws differ."""
    random.setstate(_as_python_state(state["python"]))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch_cpu"])
    saved = state.get("device")
    legacy = [k for k, v in state.items() if k not in CAPTURED_KEYS and v is not None]
    if saved is None:
        if legacy:
            return (
                f"the checkpoint's {legacy[0]} RNG state is in the old all-devices form and is "
                "not restored; exploration draws will differ from the original run"
            )
        return None
    if backend is None or device is None or saved["backend"] != backend.name:
        here = backend.name if backend is not None else "the host"
        return (
            f"the checkpoint's {saved['backend']} RNG state cannot be restored on {here}; "
            "the host's generators are restored, exploration draws will differ"
        )
    backend.set_rng_state(saved["state"], device)
    return None


def _as_python_state(value: Any) -> tuple:
    """``random.setstate`` wants tuples; a round trip may have produced lists."""
    version, internal, gauss = value
    return (version, tuple(internal), gauss)
