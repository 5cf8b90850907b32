"""How fast this machine is, for ``trm analyze``: a matmul peak, a score, predicted time."""

from __future__ import annotations

import math

from trm.data.shape import DatasetShape
from trm.hardware import HardwareProfile
from trm.measure.flops import model_flops
from trm.plugins.measure.peak import measure_gemm_peak
from trm.spec import RunSpec

# What a score (best measured matmul TFLOP/s x 100) means for TRM training.
SCORE_MEANINGS = (
    (30, "laptop-class CPU: the quickstart trains in minutes; the paper's recipes take weeks"),
    (300, "workstation CPU or small GPU: mid-size TRMs in hours; paper recipes take days"),
    (3000, "data-centre GPU class: the paper's Sudoku recipes in about a day"),
    (math.inf, "top-end accelerator: the paper's recipes in hours"),
)


def device_peak_gflops(
    hardware: HardwareProfile, device: str, precision: str
) -> tuple[float | None, str]:
    """Matmul GFLOP/s of ``device`` at ``precision``: cached ``--benchmark`` or a quick probe;
    with where the figure came from."""
    speed = hardware.speed_of(device)
    if speed is not None:
        low = precision in ("bf16", "fp16")
        value = speed.matmul_bf16_gflops if low else speed.matmul_fp32_gflops
        if value:
            return value, "measured by trm analyze --benchmark"
    try:
        probe = "bf16" if precision in ("bf16", "fp16") else "fp32"
        return measure_gemm_peak(device, probe, duration_s=0.25).gflops, "quick probe now"
    except Exception:  # no such device here, or the probe failed: say unknown
        return None, "unknown"


def performance_score(gflops: float | None) -> tuple[int | None, str]:
    """Score = best matmul TFLOP/s x 100, with what it means for TRM training."""
    if gflops is None:
        return None, "unknown: the matmul speed could not be measured"
    score = round(gflops / 10)
    for limit, meaning in SCORE_MEANINGS:
        if score < limit:
            return score, meaning
    return score, SCORE_MEANINGS[-1][1]  # pragma: no cover


def samples_per_s_at_peak(
    spec: RunSpec, dataset: DatasetShape, gflops: float | None
) -> float | None:
    """Training samples per second if every model FLOP ran at ``gflops`` (an upper bound)."""
    if not gflops:
        return None
    flops = model_flops(spec.arch, dataset.seq_len, dataset.vocab_size).per_sample
    return gflops * 1e9 / flops


def predicted_speed(
    spec: RunSpec,
    dataset: DatasetShape,
    device: str,
    precision: str,
    hardware: HardwareProfile,
    peaks: dict[tuple[str, str], float | None],
) -> tuple[float | None, float | None]:
    """(samples/s at the matmul peak, seconds to finish the spec's schedule) for a run of
    ``spec`` on ``device`` at ``precision``; ``peaks`` caches one probe per device and
    precision across calls."""
    key = (device, precision)
    if key not in peaks:
        peaks[key] = device_peak_gflops(hardware, device, precision)[0]
    rate = samples_per_s_at_peak(spec, dataset, peaks[key])
    samples = spec.train.total_steps(dataset.rows_per_epoch) * spec.train.global_batch_size
    return rate, (samples / rate if rate else None)


def format_duration(seconds: float | None) -> str:
    """``3.5 h``, ``12.0 min``, ``40 s``; "unknown" for None."""
    if seconds is None:
        return "unknown"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
