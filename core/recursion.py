"""The recursion depth as the parts outside the model see it: a schedule's shares and a
sample's work at a depth.

:class:`RecursionShare` is the value of the ``recursion_schedule`` hook: a share of the run's
optimizer steps and the depth ``(H_cycles, L_cycles)`` they run at. The planner of a wall-time
budget (``trm.plan.budget``) times a step at each depth and weighs the times by the shares.
:func:`net_calls_per_sample` is what the slowdown check (the ``report`` plugin's
``trm.plugins.report.detect``) weighs samples/s by. A top-level module, so the report can use
it without importing the measurements (which import the loop).
"""

from __future__ import annotations

from attrs import frozen


@frozen
class RecursionShare:
    """``fraction`` (0 < fraction <= 1) of a run's optimizer steps run at depth
    ``(H_cycles, L_cycles)``. A schedule is a list of them in step order whose fractions sum
    to 1; one depth may appear once only if the steps at it are contiguous."""

    fraction: float
    H_cycles: int
    L_cycles: int

    @property
    def depth(self) -> tuple[int, int]:
        return (self.H_cycles, self.L_cycles)


def net_calls_per_sample(H_cycles: int, L_cycles: int) -> int:
    """A training sample's work at depth ``(H_cycles, L_cycles)`` in forward network calls:
    the H_cycles × (L_cycles + 1) calls of the forward pass plus 2 × the L_cycles + 1 calls
    of the last H cycle, the only one that back-propagates — the network part of
    :func:`trm.measure.flops.model_flops` divided by one call's FLOPs (heads and embeddings
    left out: they do not change with the depth)."""
    return H_cycles * (L_cycles + 1) + 2 * (L_cycles + 1)
