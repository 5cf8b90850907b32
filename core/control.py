"""TrainControl: the only way a plugin acts on a running loop.

Plugins never reach into the trainer. They call these methods from their hooks; the loop reads
the requests at well-defined points (after each optimizer step) and carries them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import define, field

if TYPE_CHECKING:
    from trm.thermal_event import ThermalEvent


@define
class TrainControl:
    """Requests from plugins to the loop, plus a log sink the loop shows to the user."""

    checkpoint_reasons: list[str] = field(factory=list)
    pause_s: float = 0.0
    pause_reason: str = ""
    micro_batch_request: tuple[int, str] | None = None
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
        A size is clamped to [1, global batch]; it need not divide the global batch.
        """
        self.micro_batch_request = (size, reason)

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
