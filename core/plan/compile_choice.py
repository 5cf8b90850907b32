"""The planner's half of ``runtime.compile = "auto"`` for a small network: the backend said
torch.compile can run (``RuntimeChoice.compile_by_planner``); this module weighs the run's
planned work against this machine's compile ledger (:mod:`trm.device.compile_payoff`) and
settles ``compile``, with one notice saying why.

The ledger key needs the data's shape (the positions the network mixes), which the backend
does not know when it answers ``configure_runtime``; :func:`trm.plan.pipeline.plan_run` calls
:func:`settle_compile` once the shape is known, before the memory estimate (which differs
compiled and eager).
"""

from __future__ import annotations

import math

import attrs

from trm.data.shape import DatasetShape
from trm.device.compile_ledger import ledger_key, lookup
from trm.device.compile_payoff import PlannedWork, small_network_verdict
from trm.hardware import HardwareProfile
from trm.model import puzzle_prefix_len
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec


def planned_work(spec: RunSpec, dataset: DatasetShape) -> PlannedWork:
    """The run's steps (``train.max_steps``, or its epochs over the train split) or its
    wall-time budget (``train.time_budget_s``, which the budget planner turns into steps)."""
    train = spec.train
    if train.time_budget_s > 0:
        return PlannedWork(budget_s=float(train.time_budget_s))
    if train.max_steps > 0:
        return PlannedWork(steps=int(train.max_steps))
    rows = dataset.rows_per_epoch
    if rows > 0 and train.epochs > 0:
        return PlannedWork(steps=math.ceil(train.epochs * rows / train.global_batch_size))
    return PlannedWork()


def device_model(hardware: HardwareProfile, device: str) -> str:
    """What ``device`` is (the CPU's or the accelerator's model name), for the ledger key."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return hardware.cpu_model or "unknown CPU"
    for accelerator in hardware.accelerators or ():
        if accelerator.kind == kind and str(accelerator.index) == (index or "0"):
            return accelerator.name or accelerator.generation or kind
    return kind


def compile_key(
    spec: RunSpec, runtime: RuntimeChoice, hardware: HardwareProfile, seq_len: int
) -> str:
    """The ledger key of this run's training step (:func:`trm.device.compile_ledger.ledger_key`)."""
    return ledger_key(
        device=runtime.device.partition(":")[0],
        device_model=device_model(hardware, runtime.device),
        precision=runtime.precision,
        threads=runtime.threads,
        arch=spec.arch,
        positions=seq_len + puzzle_prefix_len(spec.arch),
        micro_batch=spec.runtime.micro_batch_size or spec.train.global_batch_size,
    )


def settle_compile(
    runtime: RuntimeChoice, spec: RunSpec, dataset: DatasetShape, hardware: HardwareProfile
) -> RuntimeChoice:
    """``runtime`` with ``compile`` settled where the backend left it to the planner (else
    unchanged); the verdict's reason joins the notes."""
    if not runtime.compile_by_planner:
        return runtime
    key = compile_key(spec, runtime, hardware, dataset.seq_len)
    verdict = small_network_verdict(planned_work(spec, dataset), lookup(key))
    return attrs.evolve(
        runtime,
        compile=verdict.compile,
        compile_key=key,
        notes=(*runtime.notes, verdict.reason),
    )
