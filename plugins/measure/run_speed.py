"""Measured speed of the tiers ``trm analyze`` shows: a few steps of the real loop each.

A prediction of samples/s must come from this machine and this model, so each tier's spec
is trained for ``warmup + steps`` optimizer steps with the real loop (:func:`time_loop`) on
a small data set of the spec's source, at the tier's micro-batch. On a CPU, networks large
enough to be bound by their matrix products are measured at ``CPU_MEASURE_BATCH`` rows at
most (their throughput per sample no longer depends on the batch, and a step at the tier's
full micro-batch can take minutes); smaller networks are measured at the tier's size, since
their per-operation overhead makes speed depend on the batch. Tiers that share runtime and
measured batch share one measurement. ``benchmarks/speed_prediction.py`` checks the figure
against what ``trm run`` then shows.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from attrs import frozen

from trm.measure.flops import matmul_bound
from trm.measure.loop_timing import BENCH_OFF, OtherLoad, bench_spec, small_data_spec, time_loop
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import Plan, choose_runtime
from trm.plugin_manager import TrmPluginManager, load_plugins
from trm.runtime import RuntimeChoice

CPU_MEASURE_BATCH = 32
WARMUP_STEPS = 2
TIMED_STEPS = 3
BUSY_LOAD = 0.25


@frozen
class MeasuredSpeed:
    """Samples per second of a plan, measured over ``steps`` steps of ``batch_size`` rows."""

    samples_per_s: float
    batch_size: int
    steps: int
    other_load: float  # share of the CPUs other processes used meanwhile (0..1)

    def describe(self) -> str:
        text = f"measured: {self.steps} steps of {self.batch_size} rows"
        if self.other_load >= BUSY_LOAD:
            text += (
                f" while other processes used {self.other_load:.0%} of the CPUs "
                "(slower than this machine can be; measure again when it is idle)"
            )
        return text


def measure_batch(plan: Plan) -> int:
    """The rows per step a measurement of ``plan`` uses (see the module docstring)."""
    spec = plan.spec
    micro = spec.runtime.micro_batch_size or spec.train.global_batch_size
    if plan.runtime.device == "cpu" and matmul_bound(spec.arch):
        return min(micro, CPU_MEASURE_BATCH)
    return micro


def measure_plans(
    pm: TrmPluginManager,
    plans: list[Plan],
    requested_plugins: list[str],
    log: Callable[[str], None],
) -> list[MeasuredSpeed]:
    """One measured speed per plan, in order."""
    measured: dict[tuple, MeasuredSpeed] = {}
    speeds = []
    for plan in plans:
        batch = measure_batch(plan)
        key = (plan.runtime, plan.spec.arch, batch)
        if key not in measured:
            runtime = choose_runtime(pm, plan.spec, plan.hardware)  # sets its threads
            log(
                f"measuring {plan.mode}: {WARMUP_STEPS} warm-up + {TIMED_STEPS} steps of "
                f"{batch} rows ({runtime.precision}, "
                f"{'compiled' if runtime.compile else 'eager'})"
            )
            measured[key] = _measure(plan, runtime, batch, requested_plugins, log)
        speeds.append(measured[key])
    return speeds


def _measure(
    plan: Plan,
    runtime: RuntimeChoice,
    batch: int,
    requested_plugins: list[str],
    log: Callable[[str], None],
) -> MeasuredSpeed:
    root = Path(tempfile.mkdtemp(prefix="trm-speed-"))
    try:
        pm = load_plugins([*requested_plugins, *BENCH_OFF])
        data_dir = ensure_dataset(pm, small_data_spec(plan.spec, pm, batch), root, log)
        spec = bench_spec(plan.spec, batch, WARMUP_STEPS + TIMED_STEPS)
        with OtherLoad() as load:
            timing = time_loop(
                spec, runtime, requested_plugins, data_dir, root / "run", WARMUP_STEPS
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return MeasuredSpeed(timing.samples_per_s, batch, len(timing.step_s), load.fraction)
