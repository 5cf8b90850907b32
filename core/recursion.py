"""The recursion depths a run trains at, as a plugin that schedules them declares them.

:class:`RecursionShare` is the value of the ``recursion_schedule`` hook: a share of the run's
optimizer steps and the depth ``(H_cycles, L_cycles)`` they run at. The planner of a wall-time
budget (``trm.plan.budget``) times a step at each depth and weighs the times by the shares.
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
