"""The machine itself: OS, Python, torch, CPU, memory budget, storage, power, math libraries.

Linux reads /proc/cpuinfo and /sys; macOS reads ``sysctl``; elsewhere only what
``platform`` and psutil know is filled. A fact that cannot be read stays None ("unknown").
Benchmark figures measured by ``trm analyze --benchmark`` are read back from the per-machine
cache so speed estimates can reuse them.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

from trm import hookimpl
from trm.hardware import VECTOR_FEATURES, HardwareProfile
from trm.measure.machine import load_cached_speeds

ACTIVATION = "default"

# The OS, a desktop and other programs need room too: this much of the total is never
# budgeted for a run (at least 1 GiB, else a tenth of the memory).
RESERVE_FRACTION = 0.10
RESERVE_MIN_BYTES = 2**30

BF16_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")
# macOS sysctl hw.optional names -> trm feature names
_MACOS_FEATURES = {
    "hw.optional.sse4_2": "sse4_2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vl": "avx512vl",
    "hw.optional.avx512vnni": "avx512_vnni",
    "hw.optional.neon": "neon",
    "hw.optional.arm.FEAT_BF16": "bf16",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
}


def memory_budget(
    total_bytes: int, available_bytes: int, reserve_min_bytes: int = RESERVE_MIN_BYTES
) -> tuple[int, int]:
    """``(reserve, budget)``: the OS reserve and the bytes a run may plan to use.

    The reserve is a tenth of the total (at least ``reserve_min_bytes``: 1 GiB for a whole
    machine, none inside a memory cgroup, whose limit the OS does not share); the budget is
    what is available now, but never more than the total less the reserve.
    """
    reserve = max(reserve_min_bytes, int(total_bytes * RESERVE_FRACTION))
    budget = max(0, min(total_bytes - reserve, available_bytes))
    return reserve, budget


CGROUP_ROOT = Path("/sys/fs/cgroup")
_NO_LIMIT_BYTES = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


def cgroup_memory_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> tuple[int, int] | None:
    """``(limit, usage)`` bytes of the tightest memory cgroup this process is in (v2
    ``memory.max``/``memory.current`` or v1 ``memory.limit_in_bytes``/``usage_in_bytes``,
    ancestors included); None without a limit or on a system without cgroups."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[tuple[int, int]] = []
    for line in lines:
        _hierarchy, controllers, path = line.split(":", 2)
        if controllers == "":
            base, limit_file, usage_file = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit_file, usage_file = (
                root / "memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = base.joinpath(*parts[:depth])
            limit = _read(str(folder / limit_file))
            usage = _read(str(folder / usage_file))
            if limit and limit.strip().isdigit() and int(limit) < _NO_LIMIT_BYTES:
                used = int(usage) if usage and usage.strip().isdigit() else 0
                found.append((int(limit), used))
    return min(found) if found else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _sysctl(name: str) -> str | None:
    """One ``sysctl -n`` value on macOS; None when missing or not macOS."""
    if sys.platform != "darwin":
        return None
    try:
        out = subprocess.run(
            ["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value else None


def _size_text(text: str) -> int | None:
    """``"32K"`` / ``"1024K"`` / ``"32M"`` (sysfs cache sizes) to bytes."""
    text = text.strip().upper()
    factor = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * factor if digits.isdigit() else None


def _linux_cpu() -> dict[str, object]:
    info: dict[str, object] = {}
    text = _read("/proc/cpuinfo")
    if text:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key in ("flags", "Features") and "cpu_flags" not in info:
                info["cpu_flags"] = tuple(sorted(set(value.split())))
            elif key == "model name" and "cpu_model" not in info:
                info["cpu_model"] = value
            elif key == "vendor_id" and "cpu_vendor" not in info:
                info["cpu_vendor"] = value
            elif key == "CPU implementer" and "cpu_vendor" not in info:
                info["cpu_vendor"] = f"ARM implementer {value}"
    cache_root = Path("/sys/devices/system/cpu/cpu0/cache")
    if cache_root.is_dir():
        for index in sorted(cache_root.glob("index*")):
            level = (_read(str(index / "level")) or "").strip()
            kind = (_read(str(index / "type")) or "").strip()
            size = _size_text(_read(str(index / "size")) or "")
            if size is None:
                continue
            if level == "1" and kind == "Data":
                info["cache_l1d_bytes"] = size
            elif level == "2":
                info["cache_l2_bytes"] = size
            elif level == "3":
                info["cache_l3_bytes"] = size
    freq = Path("/sys/devices/system/cpu/cpu0/cpufreq")
    for name, key in (("base_frequency", "cpu_base_mhz"), ("cpuinfo_max_freq", "cpu_max_mhz")):
        raw = (_read(str(freq / name)) or "").strip()
        if raw.isdigit():
            info[key] = int(raw) / 1000.0  # kHz -> MHz
    return info


def _macos_cpu() -> dict[str, object]:
    info: dict[str, object] = {}
    brand = _sysctl("machdep.cpu.brand_string")
    if brand:
        info["cpu_model"] = brand
        info["cpu_vendor"] = "Apple" if brand.startswith("Apple") else brand.split()[0]
    for name, key in (
        ("hw.l1dcachesize", "cache_l1d_bytes"),
        ("hw.l2cachesize", "cache_l2_bytes"),
        ("hw.l3cachesize", "cache_l3_bytes"),
    ):
        value = _sysctl(name)
        if value and value.isdigit() and int(value) > 0:
            info[key] = int(value)
    for name, key in (("hw.cpufrequency", "cpu_base_mhz"), ("hw.cpufrequency_max", "cpu_max_mhz")):
        value = _sysctl(name)
        if value and value.isdigit():
            info[key] = int(value) / 1e6
    flags = [feature for name, feature in _MACOS_FEATURES.items() if _sysctl(name) == "1"]
    if platform.machine() == "arm64" and "neon" not in flags:
        flags.append("neon")  # every Apple-silicon core has Advanced SIMD (NEON)
    info["cpu_flags"] = tuple(sorted(flags))
    return info


def cpu_features(flags: tuple[str, ...] | None, arch: str | None) -> tuple[str, ...] | None:
    """The vector features trm cares about, from raw flags (Linux names; ``asimd`` is NEON)."""
    if flags is None:
        return None
    present = set(flags)
    if "asimd" in present or (arch in ("aarch64", "arm64") and "fp" in present):
        present.add("neon")
    if "sse4_2" not in present and "sse4.2" in present:
        present.add("sse4_2")
    return tuple(f for f in VECTOR_FEATURES if f in present)


def _math_libraries() -> dict[str, object]:
    """MKL / oneDNN from torch.backends; Apple Accelerate from torch's build configuration."""
    info: dict[str, object] = {}
    try:
        import torch

        info["torch_version"] = torch.__version__
        info["mkl_available"] = bool(torch.backends.mkl.is_available())
        info["onednn_available"] = bool(torch.backends.mkldnn.is_available())
        if sys.platform == "darwin":
            config = torch.__config__.show().lower()
            info["accelerate_available"] = "accelerate" in config or "veclib" in config
        else:
            info["accelerate_available"] = False  # Apple Accelerate exists only on macOS
    except Exception:  # torch missing or broken: leave unknown
        pass
    return info


def _power() -> dict[str, object]:
    try:
        battery = psutil.sensors_battery()
    except (AttributeError, NotImplementedError, OSError):
        return {}
    if battery is None:
        # psutil found no battery: a desktop or server, always on mains power.
        return {"on_battery": False} if sys.platform.startswith(("linux", "darwin")) else {}
    return {"on_battery": not battery.power_plugged, "battery_percent": float(battery.percent)}


def storage_at(path: Path) -> dict[str, object]:
    """Free and total bytes of the file system holding ``path`` (its nearest existing parent)."""
    probe = path.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return {}
    return {
        "storage_path": str(path.resolve()),
        "storage_free_bytes": usage.free,
        "storage_total_bytes": usage.total,
    }


def detect(run_root: Path | None = None) -> HardwareProfile:
    """Everything this plugin can see; ``run_root`` is where run directories go (./runs)."""
    info: dict[str, object] = {
        "os": f"{platform.system()} {platform.release()}".strip() or None,
        "python": sys.version.split()[0],
        "cpu_arch": platform.machine() or None,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
    }
    if sys.platform.startswith("linux"):
        info.update(_linux_cpu())
    elif sys.platform == "darwin":
        info.update(_macos_cpu())
    if "cpu_model" not in info and platform.processor():
        info["cpu_model"] = platform.processor()
    if "cpu_max_mhz" not in info:
        try:
            freq = psutil.cpu_freq()
        except (AttributeError, NotImplementedError, OSError):
            freq = None
        if freq is not None and freq.max:
            info["cpu_max_mhz"] = float(freq.max)
    flags = info.get("cpu_flags")
    features = cpu_features(flags, info.get("cpu_arch"))  # type: ignore[arg-type]
    info["cpu_features"] = features
    info["cpu_native_bf16"] = (
        None if features is None else any(f in features for f in BF16_FEATURES)
    )

    memory = psutil.virtual_memory()
    swap = psutil.swap_memory()
    total, available = memory.total, memory.available
    limited = cgroup_memory_limit()
    reserve_min = RESERVE_MIN_BYTES
    if limited is not None and limited[0] < total:  # a container or a memory cgroup caps us
        total, available = limited[0], max(0, min(available, limited[0] - limited[1]))
        reserve_min = 0
    reserve, budget = memory_budget(total, available, reserve_min)
    info.update(
        memory_total_bytes=total,
        memory_available_bytes=available,
        swap_total_bytes=swap.total,
        swap_free_bytes=swap.free,
        memory_reserve_bytes=reserve,
        memory_budget_bytes=budget,
    )
    if sys.platform == "darwin" and platform.machine() == "arm64":
        info["unified_memory"] = True
    info.update(_math_libraries())
    info.update(storage_at(run_root or Path(os.getcwd()) / "runs"))
    info.update(_power())
    speeds, disk = load_cached_speeds()
    if speeds:
        info["device_speeds"] = speeds
    if disk is not None:
        info["disk_write_mb_per_s"] = disk
    return HardwareProfile(**info)  # type: ignore[arg-type]


@hookimpl(trylast=True)
def detect_hardware() -> HardwareProfile:
    """CPU, memory, platform, storage (at ./runs) and power; unknown facts stay None.

    ``trylast``: the generic answer; a backend's or a third party's value for the same
    field wins (see :func:`trm.hardware.merge_profiles`)."""
    return detect()
