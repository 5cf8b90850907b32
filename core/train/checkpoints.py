"""Checkpoints from the loop's side: when one is due, and saving it without losing the last.

:class:`Checkpointer` saves through the ``save_checkpoint`` hook: it refuses to save weights
that are no longer finite, and a failed save (disk full) is a warning that keeps the previous
checkpoint — three in a row stop the run. :class:`CheckpointSchedule` says when an interval
checkpoint is due: every N steps, or about every T seconds.

With ``interval_steps`` > 0 a checkpoint is due at every step divisible by it (the same steps
in an interrupted and an uninterrupted run). Otherwise the schedule turns a wall-time interval
(default about ten minutes) into a number of steps from the measured throughput: after each
checkpoint it counts steps and seconds, and a checkpoint is due once the steps done reach
``round(interval_s / mean_step_s)``. The first step of a process is left out of the
measurement (it pays for warm-up and compilation).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import torch
from attrs import define, field

from trm.errors import TrainingFailed, TrmError
from trm.plugin_manager import TrmPluginManager
from trm.state import TrainState, last_good
from trm.train.data_parallel import DataParallel
from trm.train.metrics_log import Journal

DEFAULT_CHECKPOINT_INTERVAL_S = 600.0
MAX_CHECKPOINT_FAILURES = 3
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


class Checkpointer:
    """Saves the run's checkpoints through the ``save_checkpoint`` hook; see the module doc.

    Under data parallelism (``parallel``) every rank calls :meth:`save` after the same step:
    the ranks' parts are gathered to rank 0, rank 0 alone calls the hook (one file, renamed
    into place, so no checkpoint ever lacks a rank's part), and its outcome is shared so every
    rank counts failures and checkpoint steps alike.
    ``state.checkpoint_step`` is the step of the newest checkpoint written or resumed from.
    """

    def __init__(
        self,
        pm: TrmPluginManager,
        run_dir: Path,
        schedule: CheckpointSchedule,
        journal: Journal,
        parallel: DataParallel | None = None,
    ) -> None:
        self.pm = pm
        self.run_dir = run_dir
        self.schedule = schedule
        self.journal = journal
        self.parallel = parallel if parallel is not None and parallel.active else None
        self.writes = parallel is None or parallel.world.is_first
        self.failures = 0
        self.warned_unsaved = False

    def reason_now(
        self, state: TrainState, asked: list[str], at_end: bool, stopping: bool
    ) -> str | None:
        """Why to checkpoint after this step, or None: "end" or "stop" first, then the first
        reason ``asked`` (plugins' requests, "best"), then "interval" when the schedule says
        one is due. Called after every step (the schedule measures the steps' pace)."""
        now_s = time.perf_counter()
        interval_due = self.schedule.due(state.step, now_s)
        line = self.schedule.describe_once(state.step, now_s)
        if line:
            self.journal.log(line)
        if at_end or stopping:
            return "end" if at_end else "stop"
        if asked:
            return asked[0]
        return "interval" if interval_due else None

    def save(self, state: TrainState, reason: str) -> None:
        """Checkpoint ``state`` unless this step already has one; a failure warns, and
        MAX_CHECKPOINT_FAILURES in a row raise TrainingFailed."""
        if state.checkpoint_step == state.step and reason == "stop":
            return
        if not all(bool(torch.isfinite(t).all()) for t in state.model.parameters()):
            raise TrainingFailed(
                f"step {state.step}: the weights are no longer finite; the run stops and "
                f"{last_good(state)} — lower train.lr"
            )
        parts = self.parallel.gather_parts(state) if self.parallel is not None else None
        outcome: Path | OSError | None = None
        if self.writes:
            outcome = self._write(state, reason, parts)
        if self.parallel is not None:  # every rank learns what rank 0's write did
            outcome = self.parallel.share_outcome(outcome)
        if isinstance(outcome, OSError):
            self._failed(state, reason, outcome)
            return
        path = outcome
        self.failures = 0
        self.schedule.saved(state.step, time.perf_counter())
        if path is not None:
            state.checkpoint_step = state.step
            self.journal.event(state.step, "checkpoint", quiet=True, reason=reason)
        elif not self.warned_unsaved:
            self.warned_unsaved = True
            self.journal.log(
                f"warning: step {state.step}: no checkpoint written — no plugin saves "
                "checkpoints (is checkpoint switched off?)"
            )

    def _write(
        self, state: TrainState, reason: str, parts: list[dict[str, Any]] | None
    ) -> Path | OSError | None:
        """Rank 0's write through the hook: the path, None (no plugin saves), or the OSError."""
        state.rank_parts = parts
        try:
            self.journal.metrics.sync()
            return self.pm.hook.save_checkpoint(state=state, run_dir=self.run_dir, reason=reason)
        except OSError as exc:
            return exc
        finally:
            state.rank_parts = None

    def _failed(self, state: TrainState, reason: str, exc: OSError) -> None:
        self.failures += 1
        self.journal.event(state.step, "checkpoint_failed", reason=reason, error=str(exc))
        kept = last_good(state)
        self.journal.log(
            f"warning: checkpoint at step {state.step} failed ({exc}); {kept} "
            f"({self.failures} of {MAX_CHECKPOINT_FAILURES} failures in a row stop the run)"
        )
        if self.failures >= MAX_CHECKPOINT_FAILURES:
            raise TrainingFailed(
                f"step {state.step}: {MAX_CHECKPOINT_FAILURES} checkpoint saves in a row "
                f"failed (last: {exc}); {kept} — free disk space or fix the run directory, "
                "then resume"
            ) from exc
