"""Memory estimates: itemised MemoryItems summed per location (host, device)."""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

LOCATIONS = ("host", "device")


@frozen
class MemoryItem:
    """One named share of a run's peak memory, in bytes, on the host or the device."""

    name: str
    bytes: int
    location: str = "host"
    note: str = ""


@frozen
class MemoryEstimate:
    """All items of every plugin, with per-location totals."""

    items: tuple[MemoryItem, ...]

    def total_bytes(self, location: str) -> int:
        return sum(item.bytes for item in self.items if item.location == location)


def collect_estimate(parts: Iterable[list[MemoryItem] | None]) -> MemoryEstimate:
    """Flatten the per-plugin item lists returned by ``estimate_memory``."""
    items = tuple(item for part in parts if part for item in part)
    return MemoryEstimate(items=items)
