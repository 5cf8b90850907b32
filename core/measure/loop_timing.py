"""Timing the real training loop, step by step: what a wall-time budget (``trm.plan.budget``
through :mod:`trm.measure.stage_speed`) and ``trm bench`` (the ``measure`` plugin) measure.

:func:`time_loop` trains a spec with the real loop (:class:`trm.loop.Trainer`, the same
optimizer step, data gathering, metrics and plugins as ``trm run``, less the display and
checkpoint writes: :data:`BENCH_OFF`) and times each optimizer step from the ``on_step``
hook. :func:`time_plain_loop` times the plain eager fp32 PyTorch loop of the same model, the
baseline ``trm bench`` compares against. :func:`bench_spec` and :func:`small_data_spec`
shape the spec such a timing trains: a fixed batch without evaluation or checkpoints, on a
small data set of the spec's own source. :class:`OtherLoad` says how busy other processes kept
the machine meanwhile.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs
import psutil
from attrs import frozen

from trm.data.shape import read_shape
from trm.hookspecs import hookimpl
from trm.loop import Trainer
from trm.loop.step import StepSetup, attempt_step
from trm.plan.dataset import find_data_source
from trm.plugin_manager import load_plugins
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState

# Plugins a bench switches off: the live display and checkpoint writes are not the loop's
# speed (an interval checkpoint could land inside a timed step).
BENCH_OFF = ("no:progress", "no:checkpoint")


NO_EVAL_SPLIT = "(no evaluation in a bench)"


@frozen
class LoopTiming:
    """Wall seconds of each optimizer step of one timed loop; ``warmup_s`` are excluded."""

    batch_size: int
    warmup_s: tuple[float, ...]
    step_s: tuple[float, ...]

    @property
    def samples_per_s(self) -> float:
        """Samples per second over the measured steps (total samples / total time)."""
        return self.batch_size * len(self.step_s) / sum(self.step_s)

    @property
    def best_samples_per_s(self) -> float:
        """Samples per second of the fastest measured step."""
        return self.batch_size / min(self.step_s)


class OtherLoad:
    """How busy the machine's CPUs were with *other* processes while the block ran (0..1).

    System-wide busy CPU time minus this process's CPU time, over wall time × logical CPUs.
    A bench measured with other work running is slower than the machine can be; the report
    carries this figure so a reader can tell.
    """

    def __enter__(self) -> OtherLoad:
        self._sys = psutil.cpu_times()
        self._own = psutil.Process().cpu_times()
        self._wall = time.perf_counter()
        self.fraction = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        sys_now, own_now = psutil.cpu_times(), psutil.Process().cpu_times()
        idle = ("idle", "iowait")
        busy = sum(
            getattr(sys_now, f) - getattr(self._sys, f)
            for f in sys_now._fields
            if f not in idle and f not in ("guest", "guest_nice")
        )
        own = sum(own_now[:4]) - sum(self._own[:4])
        wall = time.perf_counter() - self._wall
        cpus = psutil.cpu_count() or 1
        self.fraction = min(1.0, max(0.0, (busy - own) / max(wall * cpus, 1e-9)))


class StepTimer:
    """An in-process plugin: the wall time of every optimizer step, from the loop's hooks."""

    def __init__(self) -> None:
        self.marks: list[float] = []

    @hookimpl
    def on_train_start(self) -> None:
        self.marks = [time.perf_counter()]

    @hookimpl
    def on_step(self) -> None:
        self.marks.append(time.perf_counter())

    def step_seconds(self) -> list[float]:
        return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]


def bench_spec(spec: RunSpec, batch_size: int, total_steps: int) -> RunSpec:
    """The spec the bench trains: one micro-batch of ``batch_size`` per step, no evaluation
    (the eval split names no directory), no interval checkpoints, ``total_steps`` steps; the
    model and optimizer are unchanged."""
    train = attrs.evolve(
        spec.train,
        global_batch_size=batch_size,
        max_steps=total_steps,
        eval_interval=0,
        checkpoint_interval_steps=0,
    )
    runtime = attrs.evolve(spec.runtime, micro_batch_size=0)
    data = attrs.evolve(spec.data, eval_split=NO_EVAL_SPLIT)
    return attrs.evolve(spec, train=train, runtime=runtime, data=data)


def small_data_spec(spec: RunSpec, pm: Any, rows: int) -> RunSpec:
    """``spec`` with its ``[data.generate]`` recipe cut to ``rows`` training puzzles.

    Only options the source has are changed: ``count`` (rows), ``test_count`` (1),
    ``augment`` (0). A spec naming a built ``data.dir`` is returned unchanged; a mix has
    each of its generated tasks cut so.
    """
    if spec.data.dir:
        return spec
    if spec.data.is_mix:
        mix = tuple(
            entry
            if entry.dir
            else attrs.evolve(
                entry, generate=_small_options(pm, entry.source, entry.generate, rows)
            )
            for entry in spec.data.mix
        )
        return attrs.evolve(spec, data=attrs.evolve(spec.data, mix=mix))
    generate = _small_options(pm, spec.data.source, spec.data.generate, rows)
    return attrs.evolve(spec, data=attrs.evolve(spec.data, generate=generate))


def _small_options(pm: Any, source_name: str, options: dict[str, Any], rows: int) -> dict:
    """A source's ``[data.generate]`` options cut to ``rows`` training puzzles."""
    known = attrs.fields_dict(find_data_source(pm, source_name).options_type)
    generate = dict(options)
    for name, value in (("count", rows), ("test_count", 1), ("augment", 0)):
        if name in known:
            generate[name] = value
    return generate


def time_loop(
    spec: RunSpec,
    runtime: RuntimeChoice,
    requested_plugins: list[str],
    data_dir: Path,
    run_dir: Path,
    warmup: int,
) -> LoopTiming:
    """Train ``spec`` with the real loop into ``run_dir`` and time its optimizer steps."""
    timer = StepTimer()
    run_dir.mkdir(parents=True, exist_ok=True)
    pm = load_plugins([*requested_plugins, *BENCH_OFF], extra_modules=[("bench-timer", timer)])
    messages: list[str] = []
    trainer = Trainer(spec, runtime, pm, run_dir, data_dir, messages.append, resume="never")
    trainer.fit()
    seconds = timer.step_seconds()
    return LoopTiming(
        batch_size=spec.train.global_batch_size,
        warmup_s=tuple(seconds[:warmup]),
        step_s=tuple(seconds[warmup:]),
    )


def time_plain_loop(
    spec: RunSpec,
    runtime: RuntimeChoice,
    data_dir: Path,
    warmup: int,
    steps: int,
    optimizer: Any = None,
) -> LoopTiming:
    """The plain eager fp32 PyTorch loop of the same model, timed per step.

    What a person would write from the paper and the reference code: the reference's
    token-major formulation of the network (``position_major=False``), no autocast, no
    compile, no data reader, plugins, metrics log or checkpoints. Each step is trm's own
    optimizer step (:func:`trm.loop.step.attempt_step`: zero the gradients, one supervision
    step, the ACT loss, backward, the learning rate, the optimizer steps, EMA, one host read)
    over a batch gathered in the timed step. Same data, seed, optimizers and threads as the
    trm loop (``optimizer``: the dense optimizer's entry; None: the built-in one the spec
    names).
    """
    import torch

    from trm.data.puzzle_dataset import open_split
    from trm.data.sampler import SplitIndex, TrainSampler
    from trm.model import EMA, TinyRecursiveModel, build_optimizers
    from trm.model import candidates as latent_candidates

    train = spec.train
    torch.manual_seed(train.seed)
    index = SplitIndex(open_split(data_dir / spec.data.train_split))
    sampler = TrainSampler(index, train.global_batch_size, train.seed)
    shape = read_shape(data_dir, spec.data.train_split)
    placement = attrs.evolve(runtime.placement(), dtype=None)  # fp32, no autocast
    model = TinyRecursiveModel(spec.arch, **shape.model_kwargs(), position_major=False)
    model = model.to(placement.device).train()
    total = warmup + steps
    state = TrainState(
        spec=spec,
        model=model,
        optimizers=build_optimizers(model, train, optimizer),
        ema=EMA(model, train.ema_rate) if train.ema else None,
        carry=latent_candidates.initial_carry(
            model,
            placement.to_device(index.gather(sampler.examples_for_step(0))),
            train.latent_candidates,
        ),
        run_dir=data_dir,  # never written: the plain loop saves nothing
        total_steps=total,
        micro_batch_size=train.global_batch_size,
        backend=runtime.backend,
    )
    setup = StepSetup(
        placement, spec.arch.loss, train.global_batch_size, candidates=train.latent_candidates
    )
    seconds: list[float] = []
    for step in range(total):
        started = time.perf_counter()
        attempt_step(state, index.gather(sampler.examples_for_step(step)), setup)
        state.step += 1
        seconds.append(time.perf_counter() - started)
    return LoopTiming(
        batch_size=train.global_batch_size,
        warmup_s=tuple(seconds[:warmup]),
        step_s=tuple(seconds[warmup:]),
    )
