"""What the machine is: one frozen HardwareProfile merged from every plugin's part.

Each ``detect_hardware`` implementation returns a HardwareProfile with only the fields it
knows set; the rest stay None. The core merges the parts field by field in the order pluggy
calls the implementations, the first known value winning, except ``accelerators``, which
collects every part's. The generic ``system`` plugin is ``trylast``, so a backend's or a third
party's value for a field overrides the generic one: the plugin that knows a device best speaks
for it. None means "unknown" and is shown so — never a guess.

Who fills what (built-in plugins): ``system`` — OS, Python, torch, CPU, memory, storage,
power, math libraries and cached benchmark figures; every backend — its devices, as
``accelerators`` (the one record of a device of any kind). See docs/hardware.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import attrs
from attrs import frozen

UNKNOWN = "unknown"

# Vector features worth naming, as trm spells them (Linux /proc/cpuinfo flag names; the
# macOS detector maps sysctl names onto these).
VECTOR_FEATURES = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "neon",
    "sve",
    "bf16",
    "i8mm",
)


@frozen
class AcceleratorInfo:
    """One accelerator of any kind, as its backend plugin reports it.

    ``kind`` is the backend's name (``cuda``, ``xla``, ``npu``); ``index`` the device's
    index among its kind (``cuda:1`` is 1); ``generation`` what the runtime calls the chip
    (``v4``, ``sm_90``); ``count``: chips this one entry stands for (a TPU host reports its
    chips once); ``memory_free_bytes`` is read for this process's device only. ``bf16``,
    ``fp16``, ``tf32``: the device multiplies in that format natively (tensor cores). Unknown
    stays None."""

    kind: str
    index: int = 0
    name: str | None = None
    generation: str | None = None
    count: int | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    bf16: bool | None = None
    fp16: bool | None = None
    tf32: bool | None = None

    def describe(self) -> str:
        """One line: name, generation, memory, native formats."""
        chips = f" x{self.count}" if self.count and self.count > 1 else ""
        formats = [
            f for f, ok in (("bf16", self.bf16), ("fp16", self.fp16), ("TF32", self.tf32)) if ok
        ]
        native = f", {'/'.join(formats)}" if formats else ""
        return (
            f"{describe(self.name)}{chips}, {describe(self.generation)}, "
            f"{describe(self.memory_total_bytes, 'bytes')}{native}"
        )


@frozen
class DeviceSpeed:
    """Measured speed of one device (``trm analyze --benchmark``), cached per machine."""

    device: str
    matmul_fp32_gflops: float | None = None
    matmul_bf16_gflops: float | None = None
    memory_bandwidth_gb_per_s: float | None = None


@frozen
class HardwareProfile:
    """Facts about this machine; any field may be None (unknown)."""

    # platform
    os: str | None = None
    python: str | None = None
    torch_version: str | None = None
    mkl_available: bool | None = None
    onednn_available: bool | None = None
    accelerate_available: bool | None = None
    # CPU
    cpu_vendor: str | None = None
    cpu_model: str | None = None
    cpu_arch: str | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    cpu_base_mhz: float | None = None
    cpu_max_mhz: float | None = None
    cache_l1d_bytes: int | None = None
    cache_l2_bytes: int | None = None
    cache_l3_bytes: int | None = None
    cpu_flags: tuple[str, ...] | None = None
    cpu_features: tuple[str, ...] | None = None
    cpu_native_bf16: bool | None = None
    # memory
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    memory_reserve_bytes: int | None = None
    memory_budget_bytes: int | None = None
    # devices: every backend's, in one generic record; whether the host's memory is theirs
    unified_memory: bool | None = None
    accelerators: tuple[AcceleratorInfo, ...] | None = None
    # storage and power
    storage_path: str | None = None
    storage_free_bytes: int | None = None
    storage_total_bytes: int | None = None
    on_battery: bool | None = None
    battery_percent: float | None = None
    # measured (trm analyze --benchmark), reused from the per-machine cache
    device_speeds: tuple[DeviceSpeed, ...] | None = None
    disk_write_mb_per_s: float | None = None

    def speed_of(self, device: str) -> DeviceSpeed | None:
        """The cached measured speed of ``device`` (a ``torch.device`` string: ``cpu``,
        ``xla:0``), or None."""
        for speed in self.device_speeds or ():
            if speed.device == device or speed.device.split(":")[0] == device:
                return speed
        return None


# An environment variable: the process id of a trm process whose every descendant is trm's
# own work (a sweep's parent sets it for its trial workers), so that a worker's contention
# reading counts its sibling workers as its own load, not as other processes'.
OWN_PROCESS_ROOT_ENV = "TRM_OWN_PROCESS_ROOT"


def allowed_cpu_count() -> int:
    """The logical CPUs this process may run on: its affinity mask where the OS keeps one
    (Linux; a container's or ``taskset``'s limit shows there), else every logical CPU of the
    machine; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity masks (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def merge_profiles(parts: Iterable[HardwareProfile | None]) -> HardwareProfile:
    """Merge partial profiles in call order: for each field the first non-None value wins
    (pluggy calls ``trylast`` implementations, such as ``system``'s, last); ``accelerators``
    holds every part's, in that order (each backend reports its own devices)."""
    merged: dict[str, Any] = {}
    accelerators: list[AcceleratorInfo] | None = None
    for part in parts:
        if part is None:
            continue
        if part.accelerators is not None:
            accelerators = [*(accelerators or []), *part.accelerators]
        for f in attrs.fields(HardwareProfile):
            value = getattr(part, f.name)
            if value is not None and merged.get(f.name) is None:
                merged[f.name] = value
    if accelerators is not None:
        merged["accelerators"] = tuple(accelerators)
    return HardwareProfile(**merged)


def describe(value: Any, unit: str = "") -> str:
    """A field for display: None is "unknown"; bytes fields pass ``unit="bytes"``."""
    if value is None:
        return UNKNOWN
    if unit == "bytes":
        return format_bytes(int(value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value) if value else "none"
    if isinstance(value, float):
        return f"{value:.0f}{unit}" if value >= 100 else f"{value:.1f}{unit}"
    return f"{value}{unit}"


def format_bytes(count: int) -> str:
    """Binary units with one decimal: ``1.5 GiB``."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover
