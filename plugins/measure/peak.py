"""The machine's measured matrix-multiply peak: GEMM GFLOP/s per precision on one device.

MFU (model FLOPs utilisation) divides a run's achieved model FLOP/s by this peak, so the peak
must be the best GEMM rate the device reaches *here and now*, at the precision the run uses:
large square ``C = A @ B`` products (2·n³ FLOPs each) timed in short windows, the best window
kept. Used by ``trm bench`` and ``trm analyze --benchmark``.
"""

from __future__ import annotations

import time

import torch
from attrs import frozen

from trm.device.contract import HOST, DeviceBackend

PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Square sizes probed, smallest first; growth stops once one product takes _GROW_LIMIT_S.
_SIZES = (512, 1024, 2048, 4096, 8192)
_GROW_LIMIT_S = 0.08
_PROBE_S = 0.1  # time spent probing each size
_WINDOWS = 5


@frozen
class GemmPeak:
    """Best measured GEMM rate: ``gflops`` at square size ``size`` on ``device``.

    ``windows_gflops`` holds every timed window's rate (best is ``gflops``); ``seconds`` the
    time spent measuring.
    """

    device: str
    precision: str
    gflops: float
    size: int
    windows_gflops: tuple[float, ...]
    seconds: float


def _time_products(
    a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, count: int, backend: DeviceBackend
) -> float:
    backend.synchronize(a.device)
    start = time.perf_counter()
    for _ in range(count):
        torch.mm(a, b, out=out)
    backend.mark_step(a.device)
    backend.synchronize(a.device)
    return time.perf_counter() - start


def measure_gemm_peak(
    device: torch.device | str = "cpu",
    precision: str = "fp32",
    duration_s: float = 1.5,
    backend: DeviceBackend = HOST,
) -> GemmPeak:
    """Measure the best GEMM GFLOP/s of ``device`` at ``precision`` (fp32, bf16, fp16).

    Probes square sizes from 512 upward (until one product takes 80 ms, or 8192) for about
    0.1 s each, keeps the fastest size, then spends about ``duration_s`` in five timed
    windows of back-to-back products into a preallocated output and returns the best window.
    Inputs are random normal values (zeros could take fast paths). Raises ValueError for an
    unknown precision. ``backend`` knows how to wait for ``device``.
    """
    if precision not in PRECISION_DTYPES:
        raise ValueError(f"precision must be one of {sorted(PRECISION_DTYPES)}, got {precision!r}")
    device = torch.device(device)
    dtype = PRECISION_DTYPES[precision]
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(0)
    probes: list[tuple[float, int, float]] = []  # (rate, size, seconds per product)
    for size in _SIZES:
        a = torch.randn(size, size, generator=generator).to(device, dtype)
        b = torch.randn(size, size, generator=generator).to(device, dtype)
        out = torch.empty(size, size, device=device, dtype=dtype)
        _time_products(a, b, out, 1, backend)  # warm-up: kernel choice, page faults
        first_s = _time_products(a, b, out, 1, backend)
        count = max(1, round(_PROBE_S / max(first_s, 1e-9)))
        per_product_s = _time_products(a, b, out, count, backend) / count
        probes.append((2.0 * size**3 / per_product_s, size, per_product_s))
        if per_product_s > _GROW_LIMIT_S:
            break
    _, size, per_product_s = max(probes)
    a = torch.randn(size, size, generator=generator).to(device, dtype)
    b = torch.randn(size, size, generator=generator).to(device, dtype)
    out = torch.empty(size, size, device=device, dtype=dtype)
    window_s = max(duration_s / _WINDOWS, per_product_s)
    count = max(1, round(window_s / max(per_product_s, 1e-9)))
    flops = 2.0 * size**3 * count
    rates = tuple(flops / _time_products(a, b, out, count, backend) / 1e9 for _ in range(_WINDOWS))
    return GemmPeak(
        device=str(device),
        precision=precision,
        gflops=max(rates),
        size=size,
        windows_gflops=rates,
        seconds=time.perf_counter() - started,
    )
