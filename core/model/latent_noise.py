"""Gaussian noise in the reasoning latent ``z_L``: the trajectories of test-time exploration.

With a :class:`LatentNoise` set on the model (:meth:`TinyRecursiveModel.latent_noise_on`),
every full recursion (one H cycle: ``L_cycles`` updates of ``z_L``, then one of ``z_H``) starts
by adding ``scale * eps`` to ``z_L``, ``eps ~ N(0, I)`` drawn from the noise's own generator, with
a scale per batch row (0: that row runs exactly as without noise). Without one, the model adds
nothing and draws nothing. See docs/test-time.md.
"""

from __future__ import annotations

import torch
from attrs import define
from torch import Tensor


@define
class LatentNoise:
    """Noise of standard deviation ``scale_rows[b]`` for batch row ``b`` ([B] float32, on the
    model's device), drawn from ``generator`` (on that device, or the CPU when the device has
    none; the draws are then moved)."""

    scale_rows: Tensor
    generator: torch.Generator

    def addend(self, z_L: Tensor, position_major: bool) -> Tensor:
        """One H cycle's float32 noise for a state shaped and placed like ``z_L`` ([B, P, D],
        or [P, B, D] when ``position_major``): ``scale_rows`` times fresh draws. The model
        draws every cycle's addend before its recursion (a generator's draws cannot run inside
        a compiled graph) and adds it with :func:`add_noise`."""
        device = self.generator.device
        eps = torch.randn(z_L.shape, generator=self.generator, device=device)
        eps = eps.to(z_L.device)
        rows = (1, -1, 1) if position_major else (-1, 1, 1)
        return eps * self.scale_rows.view(rows)

    def add(self, z_L: Tensor, position_major: bool) -> Tensor:
        """``z_L`` plus one fresh :meth:`addend`, in ``z_L``'s dtype; the draws are float32
        whatever that dtype."""
        return add_noise(z_L, self.addend(z_L, position_major))


def add_noise(z_L: Tensor, addend: Tensor) -> Tensor:
    """``z_L + addend`` computed in float32, returned in ``z_L``'s dtype."""
    return (z_L.float() + addend).to(z_L.dtype)


def noise_generator(device: torch.device, seed: int) -> torch.Generator:
    """A generator seeded with ``seed`` on ``device`` where the device has generators, else on
    the CPU."""
    try:
        generator = torch.Generator(device=device)
    except RuntimeError:
        generator = torch.Generator()
    generator.manual_seed(int(seed))
    return generator
