"""When to write interval checkpoints: every N steps, or about every T seconds.

With ``interval_steps`` > 0 a checkpoint is due at every step divisible by it (the same steps
in an interrupted and an uninterrupted run). Otherwise the schedule turns a wall-time interval
(default about ten minutes) into a number of steps from the measured throughput: after each
checkpoint it counts steps and seconds, and a checkpoint is due once the steps done reach
``round(interval_s / mean_step_s)``. The first step of a process is left out of the
measurement (it pays for warm-up and compilation).
"""

from __future__ import annotations

import re

from attrs import define, field

from trm.errors import TrmError

DEFAULT_CHECKPOINT_INTERVAL_S = 600.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_interval(text: str) -> tuple[int, float]:
    """``"500"`` -> (500 steps, 0.0); ``"90s"``, ``"10m"``, ``"1h"`` -> (0, seconds)."""
    text = text.strip()
    if text.isdigit() and int(text) > 0:
        return int(text), 0.0
    match = _DURATION.match(text)
    if match and float(match.group(1)) > 0:
        return 0, float(match.group(1)) * _UNIT_S[match.group(2)]
    raise TrmError(
        f"--checkpoint-every {text!r}: give a number of steps (500) or a duration (90s, 10m, 1h)"
    )


@define
class CheckpointSchedule:
    """Decides at the end of each step whether an interval checkpoint is due."""

    interval_steps: int = 0
    interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S
    _last_step: int = field(default=-1, init=False)
    _last_s: float = field(default=0.0, init=False)
    _announced: bool = field(default=False, init=False)

    def start(self, step: int, now_s: float) -> None:
        """The loop is at ``step`` (finished steps) at time ``now_s``; restart the count."""
        self._last_step, self._last_s = step, now_s

    def steps_per_checkpoint(self, step: int, now_s: float) -> int | None:
        """The measured steps per interval, or None before a step has been measured."""
        if self.interval_steps > 0:
            return self.interval_steps
        if self._last_step < 0:
            return None
        done = step - self._last_step
        if done <= 0:
            return None
        mean_step_s = max((now_s - self._last_s) / done, 1e-9)
        return max(1, round(self.interval_s / mean_step_s))

    def due(self, step: int, now_s: float) -> bool:
        """True when an interval checkpoint should be written after ``step``."""
        if self.interval_steps > 0:
            return step % self.interval_steps == 0
        if self._last_step < 0:  # the first step of this process: start measuring after it
            self.start(step, now_s)
            return False
        every = self.steps_per_checkpoint(step, now_s)
        return every is not None and step - self._last_step >= every

    def saved(self, step: int, now_s: float) -> None:
        """A checkpoint (of any reason) was written after ``step``."""
        self.start(step, now_s)

    def describe_once(self, step: int, now_s: float) -> str | None:
        """A one-time line saying how often time-based checkpoints come, once measured."""
        if self._announced or self.interval_steps > 0:
            return None
        every = self.steps_per_checkpoint(step, now_s)
        if every is None:
            return None
        self._announced = True
        return (
            f"checkpoints every ~{every} steps (about every {self.interval_s / 60:.0f} min "
            "at the measured speed)"
        )
