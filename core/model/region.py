"""The compiled region of a supervision step: the whole recursion, as one module.

torch.compile compiles modules in place (a backend's ``compile(module, graphs)``), and what
trm compiles is not one network call but the recursion of a supervision step: every call of
the shared network ``net`` over the H and L cycles (the ones without grad and the last,
differentiable cycle) and the output heads. In one graph Inductor fuses across the calls (the
injection sums ``z_H + x``, the norms at a call's ends), AOTAutograd writes one backward whose
weight gradients accumulate inside it, and a step pays Dynamo's guards and the compiled
function's wrappers once instead of once per call. On a 2-core Zen 3 at the quickstart shape
(one thread, the other core busy) the region's step was 1.08x (batch 32) and 1.04x (batch 128)
faster than ``net``'s compiled alone, and its three compiling steps took 81 s against 25 s,
with Inductor's on-disk cache as the machine had it
(benchmarks/results/compile-unit-quickstart-epyc-zen3-shared.json).

:class:`RecursionRegion` is that unit: a module with no parameters, buffers or references of
its own; ``forward(owner, ...)`` is the owner's :meth:`~trm.model.TinyRecursiveModel.recursion`,
the owner passed in each call (a reference kept from region to owner would make a cycle with
the owner's reference to it, and a dropped model would then wait for Python's cycle collector
to free its memory). The owner keeps the region outside its registered submodules, so
state-dict keys, ``parameters()`` and checkpoints are the same compiled or not.

What stays eager, before the region: the input embeddings (the
sparse puzzle embedding makes a fresh leaf tensor on every call), the rotary tables, the
attention mask and the test-time noise draws (a generator's draws cannot be traced); after it,
the ACT halting and the carry.

Dynamo specialises the graph on what the recursion reads from the owner: the depth in force
(``H_cycles``, ``L_cycles``), grad mode, autocast, activation checkpointing and whether noise
is added. A schedule that changes the depth compiles the region once per depth it visits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

if TYPE_CHECKING:
    from .trm import TinyRecursiveModel


class RecursionRegion(nn.Module):
    """``forward(owner, z_H, z_L, x, cos_sin, mask, noise)`` is ``owner.recursion(...)``; see
    the module docstring."""

    def forward(
        self,
        owner: TinyRecursiveModel,
        z_H: Tensor,
        z_L: Tensor,
        x: Tensor,
        cos_sin: Any,
        mask: Any,
        noise: tuple[Tensor, ...] | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        return owner.recursion(z_H, z_L, x, cos_sin, mask, noise)

    def is_compiled(self) -> bool:
        """Whether calls go through torch.compile."""
        return getattr(self, "_compiled_call_impl", None) is not None
