"""memory-guard: survive out-of-memory by recomputing activations, then by halving the
micro-batch; watch memory pressure.

On an out-of-memory error in a training step (CUDA, MPS, or a failed host allocation) the
loop undoes the step and calls ``on_out_of_memory``; this plugin frees cached memory and,
the first time, where ``runtime.activation_checkpointing`` is "auto" and the model keeps its
activations, switches activation checkpointing on for the rest of the run (same results,
about one more forward of the grad-carrying calls; the micro-batch is kept). Otherwise it
asks for half the micro-batch: the global batch is unchanged — gradient accumulation doubles.
Either way the same step is retried, so no sample is skipped or counted twice.

After every step it reads memory pressure: the host's used fraction (psutil) and the device's
(the backend's ``used_fraction``: CUDA's peak reserved memory of the step over the card's
total; MPS: driver-allocated over the recommended maximum; XLA: what its runtime reports). It
only reads: the core owns the peak counters. When pressure has stayed below ``LOW_PRESSURE``
for ``GROW_AFTER_STEPS`` steps, a micro-batch it had halved doubles back, one level at a time;
each time a size fails again, it waits twice as long before retrying that size. On Linux the
kernel's OOM killer ends a process before any allocation fails, so when host memory passes
``HOST_CRITICAL`` it halves the micro-batch ahead of time and asks for a checkpoint. Every
change is logged by the loop with the reason given here."""

from __future__ import annotations

from collections.abc import Callable

import psutil
import torch
from attrs import frozen

from trm import hookimpl
from trm.control import TrainControl, accumulation_steps, fit_micro_batch
from trm.device.contract import HOST, DeviceBackend
from trm.device.oom import memory_kind
from trm.state import TrainState, recomputes_activations

LOW_PRESSURE = 0.70
HIGH_PRESSURE = 0.90
HOST_CRITICAL = 0.95
GROW_AFTER_STEPS = 50
CRITICAL_COOLDOWN_STEPS = 20


@frozen
class MemoryPressure:
    """Used fractions in [0, 1]; ``device`` is None on CPU or when it cannot be read."""

    host: float
    device: float | None = None

    @property
    def worst(self) -> float:
        return max(self.host, self.device or 0.0)

    def describe(self) -> str:
        text = f"host {self.host:.0%}"
        return text if self.device is None else f"{text}, device {self.device:.0%}"


def read_pressure(device: torch.device, backend: DeviceBackend = HOST) -> MemoryPressure:
    """The current pressure on the host and on ``device``, as its ``backend`` reads it
    (reads only; resets nothing)."""
    host = psutil.virtual_memory().percent / 100.0
    return MemoryPressure(host=host, device=backend.used_fraction(device))


def recomputation_available(state: TrainState) -> bool:
    """Whether switching activation checkpointing on could still save memory: the spec leaves
    it to trm (``runtime.activation_checkpointing = "auto"``) and the model keeps its
    activations now."""
    model = getattr(state, "model", None)
    return (
        state.spec.runtime.activation_checkpointing == "auto"
        and hasattr(model, "set_activation_checkpointing")
        and not recomputes_activations(model)
    )


class MemoryGuard:
    """memory-guard: survive out-of-memory by halving the micro-batch; watch memory pressure.

    One instance per run (the plugin manager makes it). ``reader`` replaces the pressure
    reading (tests replay readings); None reads :func:`read_pressure`.
    """

    ACTIVATION = "default"

    def __init__(self, reader: Callable[[torch.device], MemoryPressure] | None = None) -> None:
        self.reader = reader
        self.shrunk_from: list[int] = []
        self.set_size = 0
        self.low_streak = 0
        self.failures: dict[int, int] = {}
        self.warned_high = False
        self.last_critical_step = -(10**9)
        self.oom_step = -1

    def read(self, state: TrainState) -> MemoryPressure:
        if self.reader is not None:
            return self.reader(state.device)
        return read_pressure(state.device, state.backend)

    def halve(self, state: TrainState, control: TrainControl, reason: str) -> bool:
        old = state.micro_batch_size
        global_batch = state.spec.train.global_batch_size
        new = fit_micro_batch(old // 2, global_batch)
        if new >= old:
            return False
        self.shrunk_from.append(old)
        self.set_size = new
        self.low_streak = 0
        control.set_micro_batch(
            new,
            f"{reason}; memory-guard halved it (accumulation "
            f"{accumulation_steps(old, global_batch)} -> {accumulation_steps(new, global_batch)})",
        )
        return True

    def steps_before_growing(self, size: int) -> int:
        """Low-pressure steps before growing back to ``size``: doubled per failure after one."""
        return GROW_AFTER_STEPS * 2 ** max(0, self.failures.get(size, 1) - 1)

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        self.set_size = state.micro_batch_size
        configured = state.spec.runtime.micro_batch_size or state.spec.train.global_batch_size
        if state.micro_batch_size < configured:  # resumed after an earlier reduction
            self.shrunk_from.append(configured)

    @hookimpl
    def on_out_of_memory(
        self, state: TrainState, error: BaseException, control: TrainControl
    ) -> None:
        state.backend.free_cached_memory(state.device)
        size = state.micro_batch_size
        self.oom_step = state.step + 1  # the step being retried does not count as low pressure
        self.failures[size] = self.failures.get(size, 0) + 1
        kind = memory_kind(error, state.backend)
        if recomputation_available(state):
            control.set_activation_checkpointing(
                True,
                f"out of {kind} memory at micro-batch {size}; memory-guard recomputes "
                "activations from now on and keeps the micro-batch",
            )
            return
        if not self.halve(state, control, f"out of {kind} memory at micro-batch {size}"):
            control.log("memory-guard: out of memory at micro-batch 1; nothing left to shrink")

    @hookimpl
    def on_step(self, state: TrainState, metrics: dict, control: TrainControl) -> None:
        pressure = self.read(state)
        if pressure.worst >= HIGH_PRESSURE:
            self.low_streak = 0
            if not self.warned_high:
                self.warned_high = True
                control.log(f"memory-guard: memory pressure is high ({pressure.describe()})")
            if (
                pressure.host >= HOST_CRITICAL
                and state.step - self.last_critical_step >= CRITICAL_COOLDOWN_STEPS
            ):
                self.last_critical_step = state.step
                if self.halve(state, control, f"host memory {pressure.host:.0%} used"):
                    control.request_checkpoint("memory pressure")
            return
        if state.step == self.oom_step:
            return
        self.low_streak = self.low_streak + 1 if pressure.worst < LOW_PRESSURE else 0
        if not self.shrunk_from or state.micro_batch_size != self.set_size:
            return  # nothing of ours to restore, or another plugin (thermal) holds it smaller
        target = self.shrunk_from[-1]
        wait = self.steps_before_growing(target)
        if self.low_streak >= wait:
            self.shrunk_from.pop()
            self.set_size = fit_micro_batch(target, state.spec.train.global_batch_size)
            self.low_streak = 0
            control.set_micro_batch(
                self.set_size,
                f"memory pressure stayed below {LOW_PRESSURE:.0%} for {wait} steps "
                f"({pressure.describe()}); memory-guard grows it back",
            )
