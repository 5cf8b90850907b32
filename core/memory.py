"""Memory estimates: itemised MemoryItems summed per location (host, device), and a budget.

``estimate_memory`` implementations return MemoryItems; the core collects them into one
MemoryEstimate with the budget of each location, so a command can say whether a run fits.
An estimate can be re-made for a changed spec (``for_spec``), which is how the ``adapt_config``
implementations try micro-batches and precisions with every estimator plugin. The tiers
(MODES) and the share of the budget each plans for (MODE_TARGETS) are defined here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from attrs import field, frozen

if TYPE_CHECKING:
    from trm.spec import RunSpec

LOCATIONS = ("host", "device")
MODES = ("conservative", "balanced", "extreme")
DEFAULT_MODE = "balanced"  # what `trm run` and `trm estimate` fit a spec to unless told
# Share of the usable memory budget each tier plans a run's peak to take.
MODE_TARGETS = {"conservative": 0.50, "balanced": 0.75, "extreme": 0.95}
EXTREME_RISKS = (
    "extreme mode plans 95% of the memory budget: little room is left for other programs, "
    "so the system may swap (slow) or kill the run for lack of memory; a long run at full "
    "load keeps the machine hot and may throttle its clocks (see the thermal plugin)"
)


@frozen
class MemoryItem:
    """One named share of a run's peak memory, in bytes, on the host or the device."""

    name: str
    bytes: int
    location: str = "host"
    note: str = ""


@frozen
class StepMemory:
    """One training step's device tensors as the planner counts them, for a backend to charge
    what its own runtime and allocator add (``DeviceBackend.allocator_items``).

    ``activation_tensor_bytes``: the size of every tensor one layer keeps for backward in one
    grad-carrying network call, at the planned micro-batch (each its own allocation);
    ``activation_tensor_copies``: how many of each are held at the step's peak (layers times
    grad-carrying calls; one call's with activation checkpointing). ``reallocated_bytes``:
    the tensors freed and allocated again every micro-batch (the activations and the step's
    transients). ``gradient_bytes``: the float32 gradients. ``world_size``: the processes of
    a torchrun job (1 without torchrun). ``graphs``: the compiled step is replayed as device
    graphs (``RuntimeChoice.graphs``), whose private memory pool keeps what they allocate.
    """

    activation_tensor_bytes: tuple[int, ...]
    activation_tensor_copies: int
    reallocated_bytes: int
    gradient_bytes: int
    world_size: int = 1
    graphs: bool = False


@frozen
class MemoryEstimate:
    """All items of every plugin, per-location totals, and the budgets they are held against.

    ``host_budget_bytes`` is the usable host memory (after the OS reserve);
    ``device_budget_bytes`` the accelerator's memory, None without one. On a machine with
    unified memory (Apple silicon) device items also count against the host budget.
    ``replicas``: the devices one process splits its rows of a batch over (the backend's
    ``replicas()``: every local device under XLA's SPMD, else 1), so a micro-batch must divide
    by it.
    """

    items: tuple[MemoryItem, ...]
    host_budget_bytes: int | None = None
    device_budget_bytes: int | None = None
    unified_memory: bool = False
    replicas: int = 1
    remake: Callable[[RunSpec], MemoryEstimate] | None = field(default=None, eq=False, repr=False)

    def total_bytes(self, location: str) -> int:
        return sum(item.bytes for item in self.items if item.location == location)

    def charged_bytes(self, location: str) -> int:
        """Bytes held against ``location``'s budget (host includes device on unified memory)."""
        if location == "host" and self.unified_memory:
            return self.total_bytes("host") + self.total_bytes("device")
        return self.total_bytes(location)

    def budget_fraction(self) -> float | None:
        """The largest share of a budget this run needs (1.0 = exactly full); None: unknown."""
        shares = []
        for location, budget in (
            ("host", self.host_budget_bytes),
            ("device", self.device_budget_bytes),
        ):
            if budget is None:
                continue
            if location == "device" and self.unified_memory:
                continue
            shares.append(self.charged_bytes(location) / max(budget, 1))
        return max(shares) if shares else None

    def fits(self, fraction: float = 1.0) -> bool:
        """Whether every location stays within ``fraction`` of its budget (unknown: True)."""
        share = self.budget_fraction()
        return share is None or share <= fraction

    def limiting_location(self) -> str:
        """The location whose budget binds: the device where it has its own memory."""
        if self.device_budget_bytes is not None and not self.unified_memory:
            return "device"
        return "host"

    def for_spec(self, spec: RunSpec) -> MemoryEstimate:
        """The estimate remade for ``spec`` by every estimator plugin (ValueError if it cannot)."""
        if self.remake is None:
            raise ValueError("this estimate cannot be remade (it was built without a remake)")
        return self.remake(spec)


def collect_estimate(
    parts: Iterable[list[MemoryItem] | None],
    host_budget_bytes: int | None = None,
    device_budget_bytes: int | None = None,
    unified_memory: bool = False,
    remake: Callable[[RunSpec], MemoryEstimate] | None = None,
    replicas: int = 1,
) -> MemoryEstimate:
    """Flatten the per-plugin item lists returned by ``estimate_memory``.

    Raises ValueError for a negative item or an unknown location: an estimator plugin bug.
    """
    items = tuple(item for part in parts if part for item in part)
    for item in items:
        if item.bytes < 0:
            raise ValueError(f"memory item {item.name!r} has negative bytes ({item.bytes})")
        if item.location not in LOCATIONS:
            raise ValueError(f"memory item {item.name!r}: location must be one of {LOCATIONS}")
    return MemoryEstimate(
        items=items,
        host_budget_bytes=host_budget_bytes,
        device_budget_bytes=device_budget_bytes,
        unified_memory=unified_memory,
        replicas=replicas,
        remake=remake,
    )
