"""Carrying out what plugins asked through ``TrainControl``: micro-batch sizes, recursion
depth and halting exploration, activation checkpointing, host threads, thermal events,
pauses. The loop
calls these between steps (see docs/architecture.md for the order)."""

from __future__ import annotations

import time

import torch

from trm.control import TrainControl, accumulation_steps, fit_micro_batch
from trm.loop.signals import StopRequests
from trm.metrics_log import Journal
from trm.plugin_manager import TrmPluginManager
from trm.state import TrainState, recomputes_activations

PAUSE_SLICE_S = 0.25


def set_micro_batch(state: TrainState, size: int, reason: str, step: int, journal: Journal) -> None:
    """Switch to micro-batch ``size`` (already fitted), telling the user and the log why."""
    if size == state.micro_batch_size:
        return
    global_batch = state.spec.train.global_batch_size
    journal.log(
        f"step {step}: micro-batch {state.micro_batch_size} -> {size} "
        f"(accumulation {accumulation_steps(size, global_batch)}, global batch "
        f"{global_batch}): {reason}"
    )
    journal.event(
        step, "micro_batch", old=state.micro_batch_size, new=size, reason=reason, quiet=True
    )
    state.micro_batch_size = size


def apply_micro_batch_request(state: TrainState, control: TrainControl, journal: Journal) -> None:
    """Carry out the latest ``control.set_micro_batch`` request, if any."""
    if control.micro_batch_request is None:
        return
    size, reason = control.micro_batch_request
    control.micro_batch_request = None
    fitted = fit_micro_batch(size, state.spec.train.global_batch_size)
    set_micro_batch(state, fitted, reason, state.step, journal)


def dispatch_thermal_events(
    state: TrainState, control: TrainControl, pm: TrmPluginManager, journal: Journal
) -> None:
    """Record each reported thermal event and pass it to every plugin's on_thermal_event."""
    while control.thermal_events:
        event = control.thermal_events.pop(0)
        journal.event(
            state.step,
            "thermal",
            level=event.level,
            reading=event.reading,
            temperature_c=event.temperature_c,
            throttled=event.throttled,
            on_battery=event.on_battery,
            battery_percent=event.battery_percent,
            battery_low=event.battery_low,
            source=event.source,
            quiet=True,
        )
        pm.hook.on_thermal_event(event=event, control=control)


def pause(state: TrainState, control: TrainControl, stops: StopRequests, journal: Journal) -> bool:
    """Sleep as plugins asked, in short slices; True when a stop request ended the pause."""
    if control.pause_s <= 0:
        return False
    seconds, reason = control.pause_s, control.pause_reason
    control.pause_s, control.pause_reason = 0.0, ""
    journal.event(state.step, "pause", seconds=seconds, reason=reason, quiet=True)
    journal.log(f"pausing {seconds:.0f} s: {reason}")
    deadline = time.perf_counter() + seconds
    while stops.reason is None and (left := deadline - time.perf_counter()) > 0:
        time.sleep(min(left, PAUSE_SLICE_S))
    return stops.reason is not None


def apply_recursion_requests(state: TrainState, control: TrainControl, journal: Journal) -> None:
    """Carry out the latest ``set_recursion_depth`` / ``set_halt_exploration`` requests.

    The model takes them through its own API (``set_recursion``). A depth deeper than the
    spec's ``arch.H_cycles`` / ``arch.L_cycles`` is capped there (the memory estimate plans
    for the spec's depth). A depth change is recorded as a ``recursion`` event (``capped``
    says whether the request was) and shown; the exploration probability, which a schedule
    may change every step, is only recorded in the metrics rows.
    """
    model = state.model
    if control.recursion_request is not None:
        asked_H, asked_L, reason = control.recursion_request
        control.recursion_request = None
        arch = state.spec.arch
        H_cycles, L_cycles = min(asked_H, arch.H_cycles), min(asked_L, arch.L_cycles)
        old = (model.H_cycles, model.L_cycles)
        if (H_cycles, L_cycles) != old:
            model.set_recursion(H_cycles=H_cycles, L_cycles=L_cycles)
            capped = (H_cycles, L_cycles) != (asked_H, asked_L)
            journal.event(
                state.step,
                "recursion",
                H_cycles=H_cycles,
                L_cycles=L_cycles,
                old_H_cycles=old[0],
                old_L_cycles=old[1],
                reason=reason,
                capped=capped,
                quiet=True,
            )
            note = (
                f" (asked ({asked_H}, {asked_L}), capped at the spec's arch.H_cycles / "
                "arch.L_cycles, for which memory was planned)"
                if capped
                else ""
            )
            journal.log(
                f"step {state.step}: recursion depth (H_cycles, L_cycles) {old} -> "
                f"({H_cycles}, {L_cycles}): {reason}{note}"
            )
    if control.halt_exploration_request is not None:
        probability, _reason = control.halt_exploration_request
        control.halt_exploration_request = None
        model.set_recursion(halt_exploration_prob=probability)


def apply_activation_checkpointing_request(
    state: TrainState, control: TrainControl, journal: Journal, step: int | None = None
) -> bool:
    """Carry out the latest ``set_activation_checkpointing`` request; True when the setting
    changed. The model takes it (``set_activation_checkpointing``, so the checkpoint records
    it); a change is shown and recorded as an ``activation_checkpointing`` event at ``step``
    (default: the last finished step)."""
    if control.activation_checkpointing_request is None:
        return False
    on, reason = control.activation_checkpointing_request
    control.activation_checkpointing_request = None
    model = state.model
    old = recomputes_activations(model)
    if on == old:
        return False
    step = state.step if step is None else step
    model.set_activation_checkpointing(on)
    journal.event(step, "activation_checkpointing", on=on, reason=reason, quiet=True)
    journal.log(f"step {step}: activation checkpointing {'on' if on else 'off'}: {reason}")
    return True


def apply_threads_request(state: TrainState, control: TrainControl, journal: Journal) -> None:
    """Carry out the latest ``set_threads`` request: torch's intra-op threads from the next
    step on, shown and recorded as a ``threads`` event (old, new, reason) when they change."""
    if control.threads_request is None:
        return
    count, reason = control.threads_request
    control.threads_request = None
    old = torch.get_num_threads()
    if count == old:
        return
    torch.set_num_threads(count)
    journal.event(state.step, "threads", old=old, new=count, reason=reason, quiet=True)
    journal.log(f"step {state.step}: threads {old} -> {count}: {reason}")
