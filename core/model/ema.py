"""Exponential moving average of a model's weights, for evaluation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn


class EMA:
    """Shadow copies of every floating-point entry of ``model.state_dict()``.

    That is all parameters and all persistent float buffers (``H_init``/``L_init``, the
    puzzle-embedding table), keyed by state-dict name. ``update()`` sets
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
        return {
            name: value
            for name, value in model.state_dict(keep_vars=True).items()
            if value.is_floating_point()
        }

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
        """Load shadows saved by :meth:`state_dict`; names must match this model's."""
        missing = set(self.shadow) - set(state["shadow"])
        unexpected = set(state["shadow"]) - set(self.shadow)
        if missing or unexpected:
            raise KeyError(
                f"EMA state mismatch: missing {sorted(missing)}, unexpected {sorted(unexpected)}"
            )
        self.rate = float(state["rate"])
        for name, value in state["shadow"].items():
            self.shadow[name].copy_(value)
