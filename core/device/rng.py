"""Every random-number generator a run draws from, captured and restored.

A checkpoint holds them so a resumed run draws what the uninterrupted run would have; an
out-of-memory retry restores them so the retried step draws the same exploration.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch


def capture_rng(device: torch.device | None = None) -> dict[str, Any]:
    """Every RNG state a run may draw from, in weights-only-loadable form.

    Python's ``random``, NumPy's global generator, torch's CPU generator and, when
    ``device`` is an accelerator, its generators (CUDA: every visible device; MPS).
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64).copy()),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch_cpu": torch.get_rng_state(),
        "cuda": None,
        "mps": None,
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    if device is not None and device.type == "mps":
        state["mps"] = torch.mps.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng`; accelerator states are restored when present."""
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
    if state.get("cuda") is not None:
        if torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn(
                "the checkpoint holds CUDA RNG states but CUDA is not available; "
                "exploration draws will differ from the original run",
                stacklevel=2,
            )
    if state.get("mps") is not None and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])


def _as_python_state(value: Any) -> tuple:
    """``random.setstate`` wants tuples; a round trip may have produced lists."""
    version, internal, gauss = value
    return (version, tuple(internal), gauss)
