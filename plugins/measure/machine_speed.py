"""``trm analyze --benchmark``: measured matmul, memory-bandwidth and disk-write speeds.

A few seconds per device: GEMM GFLOP/s at fp32 and bf16
(:func:`trm.plugins.measure.peak.measure_gemm_peak`), memory bandwidth as the best rate of
copying a 256 MiB buffer (read + write bytes counted), and the disk's sequential write rate
(64 MiB written and fsync'ed where runs go). Results are cached per machine
(:mod:`trm.measure.machine`).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from trm.device.contract import HOST, DeviceBackend
from trm.device.memory import machine_devices
from trm.hardware import DeviceSpeed, HardwareProfile
from trm.measure.machine import save_cached_speeds
from trm.plugins.measure.peak import measure_gemm_peak

_COPY_BYTES = 256 * 2**20
_DISK_BYTES = 64 * 2**20


def measure_memory_bandwidth(
    device: str = "cpu", repeats: int = 5, backend: DeviceBackend = HOST
) -> float:
    """Best copy rate of a 256 MiB buffer on ``device`` in GB/s (bytes read + written)."""
    import torch

    dev = torch.device(device)
    count = _COPY_BYTES // 4
    src = torch.ones(count, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch: page faults and allocation outside the timing
    best_s = float("inf")
    for _ in range(repeats):
        backend.synchronize(dev)
        start = time.perf_counter()
        dst.copy_(src)
        backend.mark_step(dev)
        backend.synchronize(dev)
        best_s = min(best_s, time.perf_counter() - start)
    return 2 * _COPY_BYTES / best_s / 1e9


def measure_disk_write(directory: Path) -> float:
    """Sequential write rate where runs go, MB/s: 64 MiB in 4 MiB blocks, then fsync."""
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(4 * 2**20)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".trm-disk-", delete=True) as handle:
        start = time.perf_counter()
        for _ in range(_DISK_BYTES // len(block)):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
        elapsed = time.perf_counter() - start
    return _DISK_BYTES / elapsed / 1e6


def run_benchmark(
    hardware: HardwareProfile,
    run_root: Path,
    backends: list[DeviceBackend],
    duration_s: float = 0.6,
) -> tuple[tuple[DeviceSpeed, ...], float | None, Path]:
    """Measure every device the loaded ``backends`` can use, and the disk; cache the
    results; ``(speeds, disk MB/s, cache)``."""
    speeds: list[DeviceSpeed] = []
    for device, backend in machine_devices(hardware, backends):
        fp32 = measure_gemm_peak(device, "fp32", duration_s, backend).gflops
        bf16 = measure_gemm_peak(device, "bf16", duration_s, backend).gflops
        bandwidth = measure_memory_bandwidth(device, backend=backend)
        speeds.append(
            DeviceSpeed(
                device=device,
                matmul_fp32_gflops=round(fp32, 1),
                matmul_bf16_gflops=round(bf16, 1),
                memory_bandwidth_gb_per_s=round(bandwidth, 1),
            )
        )
    try:
        disk: float | None = round(measure_disk_write(run_root), 1)
    except OSError:
        disk = None
    path = save_cached_speeds(tuple(speeds), disk)
    return tuple(speeds), disk, path
