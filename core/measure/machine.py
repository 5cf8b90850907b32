"""The per-machine cache of measured speeds: what ``trm analyze --benchmark`` (the ``measure``
plugin) measured — each device's matmul GFLOP/s at fp32 and bf16 and memory bandwidth, and the
disk's write rate — kept in the user cache directory (platformdirs) under an id of this
machine, so ``detect_hardware`` (the ``system`` plugin) can report them and speed estimates
reuse them without measuring again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

import attrs

from trm.hardware import DeviceSpeed
from trm.paths import cache_dir

CACHE_VERSION = 1


def machine_key() -> str:
    """A short id of this machine: host name, CPU, core count and memory (hashed)."""
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [platform.node(), cpu, str(os.cpu_count()), str(psutil.virtual_memory().total)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def cache_file() -> Path:
    return cache_dir() / f"benchmark-{machine_key()}.json"


def load_cached_speeds() -> tuple[tuple[DeviceSpeed, ...], float | None]:
    """``(device speeds, disk MB/s)`` measured earlier on this machine; empty when none."""
    try:
        data = json.loads(cache_file().read_text())
    except (OSError, json.JSONDecodeError):
        return (), None
    if data.get("version") != CACHE_VERSION:
        return (), None
    speeds: list[DeviceSpeed] = []
    for entry in data.get("devices", []):
        try:
            speeds.append(DeviceSpeed(**entry))
        except TypeError:
            continue
    disk = data.get("disk_write_mb_per_s")
    return tuple(speeds), float(disk) if isinstance(disk, (int, float)) else None


def save_cached_speeds(speeds: tuple[DeviceSpeed, ...], disk_mb_per_s: float | None) -> Path:
    """Write the cache file atomically; returns its path."""
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "version": CACHE_VERSION,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "devices": [attrs.asdict(s) for s in speeds],
        "disk_write_mb_per_s": disk_mb_per_s,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document, indent=2))
    tmp.replace(path)
    return path
