"""``trm bench``: how fast the real training loop runs, against the machine's own limit.

The bench trains the spec's model with the real loop (:class:`trm.loop.Trainer`, the same
optimizer step, data gathering, metrics and plugins as ``trm run``) on a small data set
built by the spec's data source, and times each optimizer step from the ``on_step`` hook
(the core's :mod:`trm.measure.loop_timing`, which a wall-time budget times with too).
A *sample* is one puzzle through one supervision step, so a step of batch B is B samples.

It reports, measured in the same process:

- trm: samples/s over ``steps`` steps after ``warmup`` steps (compilation happens there);
- the analytic model FLOPs per sample (:mod:`trm.measure.flops`) and the achieved GFLOP/s;
- the GEMM peak at the run's precision (:mod:`.peak`, best window, measured before and
  after the loops, the higher kept) and MFU = achieved / peak;
- plain: a plain PyTorch loop of the same model in eager fp32 (no compile, no autocast, the
  reference implementation's formulation, trm's own optimizer step with nothing around it;
  :func:`trm.measure.loop_timing.time_plain_loop`), its samples/s and the speed-up of trm
  over it. It is timed before the trm loop, so it runs with the C library's default
  allocator settings (the trm loop may switch on :mod:`trm.device.host_memory` reuse).

On a GPU both loops run at batches that fit its memory (:func:`choose_batches`).
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import torch
from attrs import frozen

from trm.data.shape import read_shape
from trm.device.compile_ledger import cache_answer, compile_cache_counts, record_measurement
from trm.device.oom import is_out_of_memory
from trm.errors import TrmError
from trm.hardware import HardwareProfile
from trm.measure.flops import ModelFlops, matmul_bound, model_flops
from trm.measure.loop_timing import (
    BENCH_OFF,
    LoopTiming,
    OtherLoad,
    bench_spec,
    small_data_spec,
    time_loop,
    time_plain_loop,
)
from trm.memory import DEFAULT_MODE
from trm.plan.compile_choice import compile_key
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import plan_run
from trm.plugin_manager import load_plugins
from trm.plugins.measure.datasheet import DatasheetPeak, datasheet_peak
from trm.plugins.measure.peak import GemmPeak, measure_gemm_peak
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

# On a CPU a step of the spec's whole global batch (768 in the paper's recipes) takes minutes;
# throughput per sample is the same at a smaller batch once the products are large.
CPU_DEFAULT_BATCH = 32


@frozen
class BenchResult:
    """Everything ``trm bench --json`` prints (plain fields are None with ``--no-plain``)."""

    spec: str
    device: str
    precision: str
    threads: int
    compiled: bool
    reuse_host_memory: bool
    plugins: tuple[str, ...]
    batch_size: int
    steps: int
    warmup_steps: int
    samples_per_s: float
    best_samples_per_s: float
    step_s: tuple[float, ...]
    warmup_s: tuple[float, ...]
    flops_per_sample: int
    forward_flops_per_sample: int
    backward_flops_per_sample: int
    achieved_gflops: float
    peak_gflops: float
    peak_size: int
    peak_windows_gflops: tuple[float, ...]
    mfu: float
    plain_samples_per_s: float | None
    plain_batch_size: int | None
    plain_step_s: tuple[float, ...] | None
    plain_achieved_gflops: float | None
    fp32_peak_gflops: float | None
    plain_mfu_fp32: float | None
    speedup_vs_plain: float | None
    other_load_trm: float
    other_load_plain: float | None
    notes: tuple[str, ...]
    # MFU as the field counts it (.datasheet): on a GPU in the datasheet table,
    # against its dense bf16 peak, the headline; ``mfu`` stays against the measured peak.
    device_model: str | None = None
    mfu_basis: str = "measured GEMM peak"
    datasheet_peak_gflops: float | None = None
    datasheet_source: str | None = None
    mfu_datasheet: float | None = None
    mfu_datasheet_basis: str | None = None
    headline_mfu: float | None = None
    headline_mfu_basis: str | None = None
    # the fraction of query-key pairs attention computes (arch.attention_window; 1.0 dense),
    # which the FLOPs per sample already count
    attention_density: float = 1.0
    # compiled: the seconds compiling added to the warm-up steps (their time above that many
    # median steps) and what torch's on-disk caches answered (warm, cold, unknown); None eager
    compile_s: float | None = None
    compile_cache: str | None = None
    # where a small network's step was recorded for the compile decision (None: not recorded)
    compile_ledger_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@frozen
class BenchBatches:
    """What the two timed loops train: ``spec`` and ``runtime`` for trm's loop at ``trm``
    samples a step, the plain loop at ``plain``; ``notes``: why, one line each."""

    spec: RunSpec
    runtime: RuntimeChoice
    trm: int
    plain: int
    notes: tuple[str, ...] = ()


def choose_batches(
    pm: Any,
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    asked: int | None,
) -> BenchBatches:
    """The batches ``trm bench`` times, for ``asked`` (``--batch``) or None.

    On a device without a memory budget of its own (the CPU): ``asked``, else the spec's
    micro-batch (or global batch) at most :data:`CPU_DEFAULT_BATCH`, for both loops.

    On a device with one (a GPU): trm's loop trains what ``trm run`` would — the spec as the
    default tier plans it (:func:`trm.plan.pipeline.plan_run`: its micro-batch, precision and
    activation checkpointing), at ``asked`` samples if given, else at the planned micro-batch.
    The plain loop (fp32, eager, every activation kept) runs at the largest micro-batch the
    same tier fits for that configuration, at most trm's batch: samples/s is compared per
    sample, not per step. Neither loop is then asked for more memory than the estimate allows.
    """
    budget = runtime.backend.budget_bytes(hardware, torch.device(runtime.device))
    if budget is None:
        batch = asked or min(
            spec.runtime.micro_batch_size or spec.train.global_batch_size, CPU_DEFAULT_BATCH
        )
        return BenchBatches(spec, runtime, batch, batch)
    with tempfile.TemporaryDirectory(prefix="trm-bench-plan-") as scratch:
        planned = plan_run(pm, spec, DEFAULT_MODE, Path(scratch), hardware=hardware)
        plain_runtime = attrs.evolve(
            spec.runtime,
            precision="fp32",
            compile="off",
            activation_checkpointing="off",
            micro_batch_size=0,
        )
        plain_plan = plan_run(
            pm,
            attrs.evolve(spec, runtime=plain_runtime),
            DEFAULT_MODE,
            Path(scratch),
            hardware=hardware,
        )
    fitted = planned.spec.runtime.micro_batch_size or planned.spec.train.global_batch_size
    batch = asked or fitted
    plain_fit = plain_plan.spec.runtime.micro_batch_size or spec.train.global_batch_size
    plain = min(batch, plain_fit)
    notes = [
        f"planned {change.key}: {change.old} -> {change.new} ({change.reason})"
        for change in planned.changes
        if change.key != "runtime.micro_batch_size"
    ]
    notes += [
        f"trm's loop: {batch} samples a step"
        + (" (--batch)" if asked else f" (the {DEFAULT_MODE} plan's micro-batch)")
        + f", {planned.runtime.precision}, activation checkpointing "
        + ("on" if planned.spec.runtime.activation_checkpointing == "on" else "off")
    ]
    if plain < batch:
        notes.append(
            f"the plain fp32 eager loop: {plain} samples a step, the most the {DEFAULT_MODE} "
            "tier fits without autocast or recomputation (samples/s are compared per sample)"
        )
    return BenchBatches(planned.spec, planned.runtime, batch, plain, tuple(notes))


def out_of_memory_error(
    runtime: RuntimeChoice, loop: str, batch: int, error: BaseException
) -> TrmError | None:
    """A one-line TrmError for ``error`` when it means memory ran out (the host's, or the
    backend's device's as :func:`trm.device.oom.is_out_of_memory` recognises it); else None."""
    if not is_out_of_memory(error, runtime.backend):
        return None
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    first = first.split(". ")[0]
    return TrmError(
        f"trm bench: {loop} ran out of {runtime.device} memory at {batch} samples a step "
        f"({first}); give a smaller --batch"
    )


def run_bench(
    spec: RunSpec,
    runtime: RuntimeChoice,
    requested_plugins: list[str],
    steps: int,
    warmup: int,
    batch_size: int,
    plain: bool,
    log: Callable[[str], None],
    work_dir: Path | None = None,
    peak_s: float = 1.5,
    plain_batch_size: int | None = None,
    device_name: str | None = None,
    hardware: HardwareProfile | None = None,
) -> BenchResult:
    """Measure trm (and the plain eager fp32 loop) on ``spec``; see the module docstring.

    ``work_dir`` holds the data and run directories (a temporary directory, removed after,
    when None). ``log`` receives one line per phase. ``peak_s`` is the time given to each
    GEMM peak measurement. The plain loop trains ``plain_batch_size`` samples a step
    (None: ``batch_size``; see :func:`choose_batches`). A loop that runs out of device memory
    is a TrmError naming the loop and its batch. ``device_name`` (the GPU's name as its
    driver reports it) adds MFU against its datasheet peak where the table knows it. With
    ``hardware``, a small network's step goes into the compile ledger
    (:func:`record_small_network`).
    """
    bench = _Bench(
        spec, runtime, requested_plugins, steps, warmup, batch_size, plain_batch_size or batch_size
    )
    owned = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="trm-bench-")) if owned else Path(work_dir)
    try:
        measured = _measure(bench, plain, peak_s, root, log)
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    result = _result(bench, measured, datasheet_peak(device_name), device_name)
    if hardware is None:
        return result
    timed_spec = bench_spec(spec, batch_size, warmup + steps)
    return record_small_network(result, timed_spec, runtime, hardware, measured.seq_len)


@frozen
class _Bench:
    """What one bench runs: the spec on the runtime with these plugins, ``warmup`` + ``steps``
    steps of ``batch_size`` samples (``plain_batch`` for the plain loop)."""

    spec: RunSpec
    runtime: RuntimeChoice
    plugins: list[str]
    steps: int
    warmup: int
    batch_size: int
    plain_batch: int

    @property
    def precision(self) -> str:
        """The precision of the GEMM peak trm is held against: fp32 without autocast."""
        return self.runtime.precision if self.runtime.autocast_dtype is not None else "fp32"


@frozen
class _Measured:
    """What a bench measured: the model's FLOPs a sample, the GEMM peaks in the run's
    precision (and in fp32 for the plain loop; empty when not needed), each loop's timing and
    the share of the machine other processes held during it (no plain loop: None)."""

    flops: ModelFlops
    peaks: list[GemmPeak]
    fp32_peaks: list[GemmPeak]
    trm: LoopTiming
    trm_load: OtherLoad
    plain: LoopTiming | None
    plain_load: OtherLoad | None
    seq_len: int = 0
    compile_cache: str | None = None


def _measure(
    bench: _Bench, plain: bool, peak_s: float, root: Path, log: Callable[[str], None]
) -> _Measured:
    """Build the small dataset under ``root``, then time in this order: the GEMM peaks, the
    plain loop (when ``plain``), trm's loop, the peaks again (the higher of each is kept)."""
    spec, runtime, precision = bench.spec, bench.runtime, bench.precision
    pm = load_plugins([*bench.plugins, *BENCH_OFF])
    data_dir = ensure_dataset(pm, small_data_spec(spec, pm, bench.batch_size), root, log)
    shape = read_shape(data_dir, spec.data.train_split)
    device = runtime.device

    def peak(precision: str) -> GemmPeak:
        return measure_gemm_peak(device, precision, peak_s, runtime.backend)

    fp32_too = plain and precision != "fp32"
    log(f"measuring the {precision} matmul peak of {device}")
    peaks, fp32_peaks = [peak(precision)], [peak("fp32")] if fp32_too else []
    # The plain loop runs first: the trm loop may switch on host-memory reuse for the
    # whole process (trm.device.host_memory), which a plain PyTorch loop does not have.
    plain_timing, plain_load = _time_plain(bench, pm, data_dir, log) if plain else (None, None)
    log(
        f"timing trm: {bench.warmup} warm-up + {bench.steps} steps of {bench.batch_size} "
        f"samples ({runtime.precision}, {'compiled' if runtime.compile else 'eager'})"
    )
    spec_b = bench_spec(spec, bench.batch_size, bench.warmup + bench.steps)
    cache_before = compile_cache_counts()
    with OtherLoad() as trm_load, _memory_error(runtime, "trm's loop", bench.batch_size):
        trm_timing = time_loop(spec_b, runtime, bench.plugins, data_dir, root / "trm", bench.warmup)
    cache = cache_answer(cache_before, compile_cache_counts()) if runtime.compile else None
    log("measuring the matmul peak again (the higher of the two is kept)")
    peaks.append(peak(precision))
    if fp32_too:
        fp32_peaks.append(peak("fp32"))
    return _Measured(
        flops=model_flops(spec.arch, shape.seq_len, shape.vocab_size),
        peaks=peaks,
        fp32_peaks=fp32_peaks,
        trm=trm_timing,
        trm_load=trm_load,
        plain=plain_timing,
        plain_load=plain_load,
        seq_len=shape.seq_len,
        compile_cache=cache,
    )


def _time_plain(
    bench: _Bench, pm: Any, data_dir: Path, log: Callable[[str], None]
) -> tuple[LoopTiming, OtherLoad]:
    """The plain eager fp32 loop's timing and the other load during it; the backend's
    cached memory is freed after it."""
    runtime, batch = bench.runtime, bench.plain_batch
    log(
        f"timing the plain eager fp32 loop: {bench.warmup} warm-up + {bench.steps} steps of "
        f"{batch} samples"
    )
    spec_plain = bench_spec(bench.spec, batch, bench.warmup + bench.steps)
    optimizer = pm.dense_optimizer(bench.spec.train.optimizer)
    with OtherLoad() as load, _memory_error(runtime, "the plain loop", batch):
        timing = time_plain_loop(
            spec_plain, runtime, data_dir, bench.warmup, bench.steps, optimizer
        )
    runtime.backend.free_cached_memory(runtime.placement().device)
    return timing, load


def _result(
    bench: _Bench, measured: _Measured, sheet: DatasheetPeak | None, device_name: str | None
) -> BenchResult:
    """The :class:`BenchResult` of what was measured: rates, achieved GFLOP/s and MFU against
    the best measured peak (and against ``sheet``, the device's datasheet peak, where known)."""
    runtime, precision = bench.runtime, bench.precision
    peak = max(measured.peaks, key=_gflops)
    fp32_candidates = measured.fp32_peaks or (measured.peaks if precision == "fp32" else [])
    fp32_peak = max(fp32_candidates, key=_gflops, default=None)
    flops, trm_timing, plain_timing = measured.flops, measured.trm, measured.plain
    per_sample = flops.per_sample
    achieved = trm_timing.samples_per_s * per_sample / 1e9
    plain_rate = plain_timing.samples_per_s if plain_timing else None
    plain_gflops = plain_rate * per_sample / 1e9 if plain_rate else None
    mfu_basis = f"measured {precision} GEMM peak, {peak.gflops:.0f} GFLOP/s"
    mfu_sheet = achieved / sheet.gflops if sheet else None
    compile_s = None
    if runtime.compile:
        compile_s = compile_seconds(trm_timing.warmup_s, trm_timing.step_s)
    return BenchResult(
        spec=bench.spec.name,
        device=runtime.device,
        precision=runtime.precision,
        threads=runtime.threads,
        compiled=runtime.compile,
        reuse_host_memory=runtime.reuse_host_memory,
        plugins=tuple(bench.plugins),
        batch_size=bench.batch_size,
        steps=bench.steps,
        warmup_steps=bench.warmup,
        samples_per_s=trm_timing.samples_per_s,
        best_samples_per_s=trm_timing.best_samples_per_s,
        step_s=trm_timing.step_s,
        warmup_s=trm_timing.warmup_s,
        flops_per_sample=per_sample,
        forward_flops_per_sample=flops.forward,
        backward_flops_per_sample=flops.backward,
        achieved_gflops=achieved,
        peak_gflops=peak.gflops,
        peak_size=peak.size,
        peak_windows_gflops=tuple(w for p in measured.peaks for w in p.windows_gflops),
        mfu=achieved / peak.gflops,
        plain_samples_per_s=plain_rate,
        plain_batch_size=bench.plain_batch if plain_timing else None,
        plain_step_s=plain_timing.step_s if plain_timing else None,
        plain_achieved_gflops=plain_gflops,
        fp32_peak_gflops=fp32_peak.gflops if fp32_peak else None,
        plain_mfu_fp32=plain_gflops / fp32_peak.gflops if plain_gflops and fp32_peak else None,
        speedup_vs_plain=trm_timing.samples_per_s / plain_rate if plain_rate else None,
        other_load_trm=measured.trm_load.fraction,
        other_load_plain=measured.plain_load.fraction if measured.plain_load else None,
        notes=runtime.notes,
        device_model=sheet.model if sheet else device_name,
        mfu_basis=mfu_basis,
        datasheet_peak_gflops=sheet.gflops if sheet else None,
        datasheet_source=sheet.source if sheet else None,
        mfu_datasheet=mfu_sheet,
        mfu_datasheet_basis=sheet.describe() if sheet else None,
        headline_mfu=mfu_sheet if sheet else achieved / peak.gflops,
        headline_mfu_basis=sheet.describe() if sheet else mfu_basis,
        attention_density=flops.attention_density,
        compile_s=compile_s,
        compile_cache=measured.compile_cache,
    )


def compile_seconds(warmup_s: tuple[float, ...], step_s: tuple[float, ...]) -> float | None:
    """The seconds compiling added to the warm-up steps: their time above as many median
    timed steps (None without timed steps)."""
    if not step_s:
        return None
    return max(0.0, sum(warmup_s) - len(warmup_s) * statistics.median(step_s))


def record_small_network(
    result: BenchResult,
    timed_spec: RunSpec,
    runtime: RuntimeChoice,
    hardware: HardwareProfile,
    seq_len: int,
) -> BenchResult:
    """A small network's timed step (and compile seconds) into the compile ledger, as a run
    of this batch would record it (:mod:`trm.loop.compile_record`); ``result`` with the key
    it went under (unchanged for a large network, or when the ledger is off)."""
    if matmul_bound(timed_spec.arch) or not result.step_s:
        return result
    key = compile_key(timed_spec, runtime, hardware, seq_len)
    step_s = statistics.median(result.step_s)
    if result.compiled:
        written = record_measurement(
            key,
            compiled_step_s=step_s,
            compile_s=result.compile_s,
            compile_cache=result.compile_cache or "unknown",
        )
    else:
        written = record_measurement(key, eager_step_s=step_s)
    return attrs.evolve(result, compile_ledger_key=key) if written else result


@contextlib.contextmanager
def _memory_error(runtime: RuntimeChoice, loop: str, batch: int) -> Iterator[None]:
    """Turn the backend's out-of-memory error inside the block into a one-line TrmError."""
    try:
        yield
    except Exception as exc:
        one_line = out_of_memory_error(runtime, loop, batch, exc)
        if one_line is None:
            raise
        raise one_line from exc


def _gflops(peak: GemmPeak) -> float:
    return peak.gflops
