"""TrainControl: the only way a plugin acts on a running loop.

Plugins never reach into the trainer. They call these methods from their hooks; the loop reads
the requests after each optimizer step (and once after ``on_train_start``, before the first
step), in the order docs/architecture.md gives, and carries them out. Also here: the
micro-batch arithmetic every plugin that asks for a size needs (:func:`fit_micro_batch`,
:func:`accumulation_steps`) and :class:`ThermalEvent`, which sensor plugins report through
:meth:`TrainControl.report_thermal_event`.
"""

from __future__ import annotations

from attrs import define, field, frozen

LEVELS = ("normal", "warm", "hot", "critical")


def fit_micro_batch(size: int, global_batch: int) -> int:
    """``size`` clamped to [1, global_batch]. It need not divide the global batch: the step's
    last micro-batch then holds the remaining rows."""
    return max(1, min(int(size), global_batch))


def accumulation_steps(micro_batch_size: int, global_batch: int) -> int:
    """How many micro-batches one optimizer step of ``global_batch`` rows runs."""
    return -(-global_batch // max(1, micro_batch_size))


@frozen
class ThermalEvent:
    """One change of thermal or power level, with the reading behind it.

    ``level`` is one of LEVELS; ``reading`` says what was measured in words, e.g.
    "cpu 92 °C (k10temp Tctl), clock 61% of max". ``temperature_c`` is the hottest sensor,
    ``throttled`` whether the hardware reports slowing down (None: cannot tell);
    ``on_battery``/``battery_percent`` describe power (None: no battery or unknown);
    ``battery_low`` is True when on battery below the plugin's threshold. ``source`` names
    the sensor source ("linux", "macos", "nvml", "trace").
    """

    level: str
    reading: str
    temperature_c: float | None = None
    on_battery: bool | None = None
    battery_percent: float | None = None
    throttled: bool | None = None
    battery_low: bool = False
    source: str = ""


@define
class TrainControl:
    """Requests from plugins to the loop, plus a log sink the loop shows to the user."""

    checkpoint_reasons: list[str] = field(factory=list)
    pause_s: float = 0.0
    pause_reason: str = ""
    micro_batch_request: tuple[int, str] | None = None
    recursion_request: tuple[int, int, str] | None = None
    halt_exploration_request: tuple[float, str] | None = None
    activation_checkpointing_request: tuple[bool, str] | None = None
    threads_request: tuple[int, str] | None = None
    stop_reason: str | None = None
    messages: list[str] = field(factory=list)
    thermal_events: list[ThermalEvent] = field(factory=list)

    def request_checkpoint(self, reason: str) -> None:
        """Ask for a checkpoint after the current step."""
        self.checkpoint_reasons.append(reason)

    def pause(self, seconds: float, reason: str) -> None:
        """Ask the loop to sleep ``seconds`` after the current step (longest request wins)."""
        if seconds > self.pause_s:
            self.pause_s, self.pause_reason = seconds, reason

    def set_micro_batch(self, size: int, reason: str) -> None:
        """Ask for a new micro-batch size; the global batch stays (accumulation adapts).

        Applied after the current step (at once, before the retry, from on_out_of_memory).
        A size is clamped to [1, global batch] (:func:`fit_micro_batch`); it need not divide
        the global batch.
        """
        self.micro_batch_request = (size, reason)

    def set_recursion_depth(self, H_cycles: int, L_cycles: int, reason: str) -> None:
        """Ask for ``H_cycles`` and ``L_cycles`` from the next step on (latest request wins).

        Applied after the current step, or before the first step when asked from
        ``on_train_start``; the metrics rows and the checkpoint record the depth in force.
        The memory estimate plans for the spec's ``arch.H_cycles`` / ``arch.L_cycles``, so
        the loop caps a deeper request at those values and says so. No shape depends on the
        depth: weights, optimizer state and the carry stay valid. ValueError below 1.
        """
        if int(H_cycles) < 1 or int(L_cycles) < 1:
            raise ValueError(f"recursion depth must be at least 1, got ({H_cycles}, {L_cycles})")
        self.recursion_request = (int(H_cycles), int(L_cycles), reason)

    def set_halt_exploration(self, probability: float, reason: str) -> None:
        """Ask for the halting exploration probability (``arch.halt_exploration_prob``'s
        meaning) from the next step on; applied like :meth:`set_recursion_depth` and
        recorded the same way. ValueError outside [0, 1]."""
        if not 0.0 <= float(probability) <= 1.0:
            raise ValueError(f"halt exploration probability must be in [0, 1], got {probability}")
        self.halt_exploration_request = (float(probability), reason)

    def set_activation_checkpointing(self, on: bool, reason: str) -> None:
        """Ask the loop to recompute (True) or keep (False) the grad-carrying activations
        from the next step on, for the rest of the run (latest request wins).

        Applied after the current step, or at once, before the retry, when asked from
        ``on_out_of_memory`` (the retry then keeps its micro-batch). Recomputation changes no
        result (trm.model.trm: the same gradients, bit for bit on the CPU in float32); it costs
        about one more forward of the grad-carrying calls. The loop records the switch as an
        ``activation_checkpointing`` event and the checkpoint records the setting in force.
        """
        self.activation_checkpointing_request = (bool(on), reason)

    def set_threads(self, count: int, reason: str) -> None:
        """Ask for ``count`` host threads for the math of the next steps (torch's intra-op
        threads; latest request wins). Applied after the current step; the loop shows the
        change and records it as a ``threads`` event. Results of a step may differ in the last
        bits with the thread count (sums split differently). ValueError below 1."""
        if int(count) < 1:
            raise ValueError(f"thread count must be at least 1, got {count}")
        self.threads_request = (int(count), reason)

    def stop(self, reason: str) -> None:
        """Ask the loop to checkpoint and stop after the current step."""
        self.stop_reason = reason

    def report_thermal_event(self, event: ThermalEvent) -> None:
        """Announce a thermal or power change; the loop passes it to ``on_thermal_event``.

        Used by sensor plugins (thermal) from ``on_step``; the loop calls the hook for every
        plugin after the step and records the event in metrics.jsonl.
        """
        self.thermal_events.append(event)

    def log(self, message: str) -> None:
        """Show ``message`` to the user and keep it in the run log."""
        self.messages.append(message)

    def take_messages(self) -> list[str]:
        """The messages logged since the last call (the loop shows them), emptied."""
        messages, self.messages = self.messages, []
        return messages
