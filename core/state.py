"""TrainState: everything a checkpoint must hold to continue a run exactly.

The loop owns and mutates one TrainState. ``state_dict()`` returns only tensors, numbers,
strings and containers of them, so checkpoints load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from attrs import define, field

import trm
from trm.spec import RunSpec, spec_to_dict


@define
class TrainState:
    """The live state of a run; see ``state_dict`` for what is saved."""

    spec: RunSpec
    model: torch.nn.Module
    optimizers: list[Any]
    ema: Any | None
    carry: Any | None
    run_dir: Path
    total_steps: int
    step: int = 0
    samples: int = 0
    micro_batch_size: int = 0
    best_exact_accuracy: float = 0.0
    last_eval: dict[str, float] = field(factory=dict)
    wall_s_before: float = 0.0
    data_dir: str = ""
    dataset_shape: dict[str, int] = field(factory=dict)

    def state_dict(self) -> dict[str, Any]:
        """A weights-only-loadable payload: model, optimizers, EMA, carry, RNG, position."""
        return {
            "trm_version": trm.__version__,
            "spec": spec_to_dict(self.spec),
            "model": self.model.state_dict(),
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "carry": self.carry.state_dict() if self.carry is not None else None,
            "step": self.step,
            "samples": self.samples,
            "micro_batch_size": self.micro_batch_size,
            "best_exact_accuracy": self.best_exact_accuracy,
            "last_eval": dict(self.last_eval),
            "wall_s": self.wall_s_before,
            "data_dir": self.data_dir,
            "dataset_shape": dict(self.dataset_shape),
            "rng_torch": torch.get_rng_state(),
        }


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over the model state in sorted key order: name, dtype, shape, then raw bytes."""
    digest = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(key.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
