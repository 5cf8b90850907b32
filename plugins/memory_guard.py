"""memory-guard: survive out-of-memory by halving the micro-batch; watch memory pressure.

On an out-of-memory error in a training step (CUDA, MPS, or a failed host allocation) the
loop undoes the step and calls ``on_out_of_memory``; this plugin frees cached memory and asks
for half the micro-batch. The global batch is unchanged — gradient accumulation doubles — and
the same step is retried, so no sample is skipped or counted twice.

After every step it reads memory pressure: the host's used fraction (psutil) and the device's
(CUDA: peak reserved this step over the card's total; MPS: driver-allocated over the
recommended maximum). When pressure has stayed below ``LOW_PRESSURE`` for
``GROW_AFTER_STEPS`` steps, a micro-batch it had halved doubles back, one level at a time;
each time a size fails again, it waits twice as long before retrying that size. On Linux the
kernel's OOM killer ends a process before any allocation fails, so when host memory passes
``HOST_CRITICAL`` it halves the micro-batch ahead of time and asks for a checkpoint. Every
change is logged by the loop with the reason given here.
"""

from __future__ import annotations

from collections.abc import Callable

import psutil
import torch
from attrs import define, field, frozen

from trm import hookimpl
from trm.control import TrainControl
from trm.oom import free_cached_memory, memory_kind
from trm.state import TrainState
from trm.train import accumulation_steps, fit_micro_batch

ACTIVATION = "default"

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


def read_pressure(device: torch.device) -> MemoryPressure:
    """The current pressure on the host and on ``device`` (resets CUDA's peak counter)."""
    host = psutil.virtual_memory().percent / 100.0
    used: float | None = None
    if device.type == "cuda" and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(device).total_memory
        used = torch.cuda.max_memory_reserved(device) / total
        torch.cuda.reset_peak_memory_stats(device)
    elif device.type == "mps" and hasattr(torch, "mps"):
        limit = torch.mps.recommended_max_memory()
        used = torch.mps.driver_allocated_memory() / limit if limit else None
    return MemoryPressure(host=host, device=used)


@define
class _Guard:
    """Per-run state: the sizes this plugin halved from, and the low-pressure streak."""

    reader: Callable[[torch.device], MemoryPressure] = read_pressure
    shrunk_from: list[int] = field(factory=list)
    set_size: int = 0
    low_streak: int = 0
    failures: dict[int, int] = field(factory=dict)
    warned_high: bool = False
    last_critical_step: int = -(10**9)
    oom_step: int = -1

    def reset(self, state: TrainState) -> None:
        self.shrunk_from.clear()
        self.failures.clear()
        self.low_streak = 0
        self.warned_high = False
        self.last_critical_step = -(10**9)
        self.oom_step = -1
        self.set_size = state.micro_batch_size
        configured = state.spec.runtime.micro_batch_size or state.spec.train.global_batch_size
        if state.micro_batch_size < configured:  # resumed after an earlier reduction
            self.shrunk_from.append(configured)

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


_guard = _Guard()


def set_reader(reader: Callable[[torch.device], MemoryPressure] | None) -> None:
    """Replace the pressure reader (tests replay readings); None restores the real one."""
    _guard.reader = reader or read_pressure


@hookimpl
def on_train_start(state: TrainState, control: TrainControl) -> None:
    _guard.reset(state)


@hookimpl
def on_out_of_memory(state: TrainState, error: BaseException, control: TrainControl) -> None:
    device = state.device
    free_cached_memory(device)
    size = state.micro_batch_size
    _guard.oom_step = state.step + 1  # the step being retried does not count as low pressure
    _guard.failures[size] = _guard.failures.get(size, 0) + 1
    kind = memory_kind(error)
    if not _guard.halve(state, control, f"out of {kind} memory at micro-batch {size}"):
        control.log("memory-guard: out of memory at micro-batch 1; nothing left to shrink")


@hookimpl
def on_step(state: TrainState, metrics: dict, control: TrainControl) -> None:
    pressure = _guard.reader(state.device)
    if pressure.worst >= HIGH_PRESSURE:
        _guard.low_streak = 0
        if not _guard.warned_high:
            _guard.warned_high = True
            control.log(f"memory-guard: memory pressure is high ({pressure.describe()})")
        if (
            pressure.host >= HOST_CRITICAL
            and state.step - _guard.last_critical_step >= CRITICAL_COOLDOWN_STEPS
        ):
            _guard.last_critical_step = state.step
            if _guard.halve(state, control, f"host memory {pressure.host:.0%} used"):
                control.request_checkpoint("memory pressure")
        return
    if state.step == _guard.oom_step:
        return
    _guard.low_streak = _guard.low_streak + 1 if pressure.worst < LOW_PRESSURE else 0
    if not _guard.shrunk_from or state.micro_batch_size != _guard.set_size:
        return  # nothing of ours to restore, or another plugin (thermal) holds it smaller
    target = _guard.shrunk_from[-1]
    wait = _guard.steps_before_growing(target)
    if _guard.low_streak >= wait:
        _guard.shrunk_from.pop()
        _guard.set_size = fit_micro_batch(target, state.spec.train.global_batch_size)
        _guard.low_streak = 0
        control.set_micro_batch(
            _guard.set_size,
            f"memory pressure stayed below {LOW_PRESSURE:.0%} for {wait} steps "
            f"({pressure.describe()}); memory-guard grows it back",
        )
