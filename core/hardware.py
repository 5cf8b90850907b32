"""What the machine is: one frozen HardwareProfile merged from every plugin's part.

Each ``detect_hardware`` implementation returns a HardwareProfile with only the fields it
knows set; the rest stay None. The core merges the parts field by field, the first known
value winning (plugins run in registration order). None means "unknown" and is shown so —
never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from attrs import frozen


@frozen
class HardwareProfile:
    """Facts about this machine; any field may be None (unknown)."""

    os: str | None = None
    python: str | None = None
    torch_version: str | None = None
    cpu_model: str | None = None
    cpu_arch: str | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    cpu_flags: tuple[str, ...] | None = None
    cpu_native_bf16: bool | None = None
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    cuda_devices: tuple[str, ...] | None = None
    cuda_memory_bytes: int | None = None
    mps_available: bool | None = None


def merge_profiles(parts: Iterable[HardwareProfile | None]) -> HardwareProfile:
    """Merge partial profiles: for each field the first non-None value wins."""
    merged: dict[str, object] = {}
    for part in parts:
        if part is None:
            continue
        for f in attrs.fields(HardwareProfile):
            value = getattr(part, f.name)
            if value is not None and merged.get(f.name) is None:
                merged[f.name] = value
    return HardwareProfile(**merged)
