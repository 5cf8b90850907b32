"""Seconds per optimizer step at each recursion depth, measured with the real loop: the
timer behind a wall-time budget (``trm.plan.budget``).

For each depth, the run's adapted spec with ``arch.H_cycles`` / ``arch.L_cycles`` set to it
is trained for :data:`WARMUP_STEPS` + :data:`TIMED_STEPS` optimizer steps by the real loop
(:func:`trm.measure.loop_timing.time_loop`: same runtime, micro-batch, global batch, optimizers and
plugins as the run, less the display, checkpoints, evaluation and the plugins that schedule
the recursion, which would change the depth being timed) on a small data set of the spec's
source (one global batch of puzzles) built in a temporary directory. The step time is the
median of the timed steps. These steps are thrown away with the model that took them, and
every random generator (the host's and the run's device's) is restored to its state before
the timing, so the timing changes nothing the run trains or draws; nothing is written to the
run directory. A stop while timing (Ctrl-C, SIGTERM: the timing loop finishes
its step and ends) stops the command (KeyboardInterrupt: exit 130) rather than planning from
fewer steps.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import torch

from trm.device.rng import capture_rng, restore_rng
from trm.loop.compile_record import StepClock, compile_excess_s
from trm.measure.loop_timing import BENCH_OFF, NO_EVAL_SPLIT, OtherLoad, small_data_spec, time_loop
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import Plan
from trm.plugin_manager import load_plugins
from trm.spec import RunSpec

WARMUP_STEPS = 2
TIMED_STEPS = 5
BUSY_LOAD = 0.25  # other processes' share of the CPUs from which the timing says so

Depth = tuple[int, int]


def timing_spec(spec: RunSpec, depth: Depth) -> RunSpec:
    """``spec`` at ``depth`` for :data:`WARMUP_STEPS` + :data:`TIMED_STEPS` steps, with no
    evaluation and no interval checkpoints; batch, micro-batch and model otherwise as given."""
    arch = attrs.evolve(spec.arch, H_cycles=depth[0], L_cycles=depth[1])
    train = attrs.evolve(
        spec.train,
        max_steps=WARMUP_STEPS + TIMED_STEPS,
        time_budget_s=0.0,
        eval_interval=0,
        checkpoint_interval_steps=0,
    )
    data = attrs.evolve(spec.data, eval_split=NO_EVAL_SPLIT)
    return attrs.evolve(spec, arch=arch, train=train, data=data)


def time_depths(
    plan: Plan,
    depths: Sequence[Depth],
    plugins_off: Sequence[str],
    requested_plugins: Sequence[str] = (),
    log: Callable[[str], None] = print,
    clock: StepClock | None = None,
) -> dict[Depth, float]:
    """Median seconds of one optimizer step of ``plan`` at each of ``depths`` (see the module
    docstring). ``requested_plugins`` are the run's ``--plugins``; ``plugins_off`` are
    switched off while timing. With the network compiled, each depth's warm-up steps compile
    it: their seconds above that depth's median are added to ``clock``, the run's
    (:meth:`trm.loop.compile_record.StepClock.add_compile_seconds`), as compiling's cost."""
    requested = [*requested_plugins, *(f"no:{name}" for name in plugins_off)]
    spec = plan.spec
    shown = ", ".join(f"({H_cycles}, {L_cycles})" for H_cycles, L_cycles in depths)
    log(
        f"timing {WARMUP_STEPS} warm-up + {TIMED_STEPS} steps of {spec.train.global_batch_size} "
        f"samples at depth {shown} to plan train.time_budget_s (these steps are discarded)"
    )
    root = Path(tempfile.mkdtemp(prefix="trm-budget-"))
    seconds: dict[Depth, float] = {}
    backend, device = plan.runtime.backend, torch.device(plan.runtime.device)
    generators = capture_rng(backend, device)
    try:
        pm = load_plugins([*requested, *BENCH_OFF])
        small = small_data_spec(spec, pm, spec.train.global_batch_size)
        data_dir = ensure_dataset(pm, small, root, lambda _line: None)
        with OtherLoad() as load:
            for number, depth in enumerate(depths):
                timing = time_loop(
                    timing_spec(spec, depth),
                    plan.runtime,
                    requested,
                    data_dir,
                    root / f"run-{number}",
                    WARMUP_STEPS,
                )
                if len(timing.step_s) < TIMED_STEPS:  # the loop stopped: SIGINT or SIGTERM
                    raise KeyboardInterrupt
                seconds[depth] = statistics.median(timing.step_s)
                if clock is not None and plan.runtime.compile:
                    clock.add_compile_seconds(compile_excess_s(timing.warmup_s, seconds[depth]))
    finally:
        restore_rng(generators, backend, device)
        shutil.rmtree(root, ignore_errors=True)
    if load.fraction >= BUSY_LOAD:
        log(
            f"note: other processes used {load.fraction:.0%} of the CPUs while timing: the "
            "plan is for a machine this busy"
        )
    return seconds
