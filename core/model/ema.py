"""Exponential moving average of a model's weights, for evaluation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn


class EMA:
    """Shadow copies of the model's trainable parameters, keyed by name.

    As in the reference implementation, only parameters that require gradients are
    averaged: buffers — the constant ``H_init``/``L_init`` and the puzzle-embedding table,
    which sign-SGD trains — are not, so evaluation with the EMA weights uses the live
    table (1.8 GB at ARC-AGI-1's scale, which an average would double). ``update()`` sets
    ``shadow = rate * shadow + (1 - rate) * current``. Methods taking ``model`` default to
    the model given at construction; any model with the same state-dict names works.
    """

    def __init__(self, model: nn.Module, rate: float) -> None:
        if not 0.0 < rate < 1.0:
            raise ValueError(f"rate must be in (0, 1), got {rate}")
        self.model = model
        self.rate = rate
        self.shadow: dict[str, Tensor] = {
            name: value.detach().clone() for name, value in self._tracked(model).items()
        }

    def _pick(self, model: nn.Module | None) -> nn.Module:
        return self.model if model is None else model

    @staticmethod
    def _tracked(model: nn.Module) -> dict[str, Tensor]:
        return {name: p for name, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def update(self, model: nn.Module | None = None) -> None:
        """Move each shadow tensor a fraction ``1 - rate`` toward the current weights."""
        current = self._tracked(self._pick(model))
        for name, shadow in self.shadow.items():
            shadow.lerp_(current[name].detach().to(shadow.dtype), 1.0 - self.rate)

    @torch.no_grad()
    def copy_to(self, model: nn.Module | None = None) -> None:
        """Overwrite the model's tracked tensors with the shadow copies."""
        current = self._tracked(self._pick(model))
        for name, shadow in self.shadow.items():
            current[name].copy_(shadow)

    @contextmanager
    def swap_in(self, model: nn.Module | None = None) -> Iterator[nn.Module]:
        """Within the block the model holds the EMA weights; its own are restored after."""
        target = self._pick(model)
        backup = {name: value.detach().clone() for name, value in self._tracked(target).items()}
        self.copy_to(target)
        try:
            yield target
        finally:
            with torch.no_grad():
                current = self._tracked(target)
                for name, saved in backup.items():
                    current[name].copy_(saved)

    def to(self, device: torch.device | str) -> EMA:
        """Move the shadow copies to ``device`` (in place); returns self."""
        self.shadow = {name: t.to(device) for name, t in self.shadow.items()}
        return self

    def state_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load shadows saved by :meth:`state_dict`; every tracked name must be present.

        Extra names are ignored: checkpoints of earlier trm versions also averaged buffers
        (the puzzle-embedding table), which this EMA no longer tracks.
        """
        missing = set(self.shadow) - set(state["shadow"])
        if missing:
            raise KeyError(f"EMA state mismatch: missing {sorted(missing)}")
        self.rate = float(state["rate"])
        for name in self.shadow:
            self.shadow[name].copy_(state["shadow"][name])
