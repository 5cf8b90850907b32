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

import contextlib
import re
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import torch
from attrs import define, field, frozen

from trm.errors import TrainingFailed, TrmError
from trm.loop.data_parallel import DataParallel
from trm.metrics_log import Journal
from trm.plugin_manager import TrmPluginManager
from trm.state import TrainState, last_good

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


@frozen
class WriteFailed:
    """A checkpoint write that raised, as every rank learns it (plain text, so it crosses
    ranks whatever the error was): the error in words, and whether it was an ``OSError`` (the
    disk or the run directory) rather than a fault of the plugin that saves."""

    error: str
    os_error: bool

    @classmethod
    def of(cls, exc: Exception) -> WriteFailed:
        if isinstance(exc, OSError):
            return cls(str(exc) or type(exc).__name__, True)
        text = str(exc).strip().splitlines()
        return cls(f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__, False)

    def what_to_do(self) -> str:
        if self.os_error:
            return "free disk space or fix the run directory, then resume"
        return (
            "fix or switch off the plugin whose save_checkpoint raised (trm plugins lists "
            "them), then resume"
        )


Outcome = Path | WriteFailed | None
"""What a checkpoint write did: the file written, a failure, or None (no plugin saves)."""


@define
class PendingWrite:
    """Rank 0's checkpoint being written in the background (on the other ranks only its step
    and reason are known): the thread, and its outcome once it ends."""

    step: int
    reason: str
    thread: threading.Thread | None = None
    outcome: Outcome = None


class Checkpointer:
    """Saves the run's checkpoints through the ``save_checkpoint`` hook; see the module doc.

    Under data parallelism (``parallel``) every rank calls :meth:`save` after the same step:
    the ranks' parts are gathered to rank 0, rank 0 alone calls the hook (one file, renamed
    into place, so no checkpoint ever lacks a rank's part), and its outcome is shared so every
    rank counts failures and checkpoint steps alike.

    ``background`` (the default under data parallelism): rank 0 copies the checkpoint to host
    memory, each tensor once (``TrainState.state_dict(fresh=True)``: the weights, optimizer
    states, EMA, every rank's carry rows), and every rank trains on at once, while a thread
    serializes, fsyncs, hashes and rotates. The next checkpoint first waits for that write and
    shares its outcome (:meth:`settle`); an "end" or "stop" checkpoint is waited for at once,
    and :meth:`flush` waits for a write the run's end left pending. A failed background write
    is counted when it is settled.
    ``state.checkpoint_step`` is the step of the newest checkpoint written (settled) or
    resumed from.
    """

    def __init__(
        self,
        pm: TrmPluginManager,
        run_dir: Path,
        schedule: CheckpointSchedule,
        journal: Journal,
        parallel: DataParallel | None = None,
        background: bool | None = None,
    ) -> None:
        self.pm = pm
        self.run_dir = run_dir
        self.schedule = schedule
        self.journal = journal
        self.parallel = parallel if parallel is not None and parallel.active else None
        self.writes = parallel is None or parallel.world.is_first
        self.background = self.parallel is not None if background is None else background
        self.pending: PendingWrite | None = None
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
        pending_step = self.pending.step if self.pending is not None else None
        if reason == "stop" and state.step in (state.checkpoint_step, pending_step):
            return
        finite = torch.stack([torch.isfinite(t).all() for t in state.model.parameters()])
        if not bool(finite.all()):  # one host read for the whole model
            raise TrainingFailed(
                f"step {state.step}: the weights are no longer finite; the run stops and "
                f"{last_good(state)} — lower train.lr"
            )
        self.settle(state)  # the previous background write ends before this one starts
        parts = self.parallel.gather_parts(state) if self.parallel is not None else None
        if self.background:
            if self.writes:
                self._start_write(state, reason, parts)
            else:
                self.pending = PendingWrite(state.step, reason)
            self.schedule.saved(state.step, time.perf_counter())
            if reason in ("end", "stop"):  # the run ends: its last checkpoint must be on disk
                self.settle(state)
            return
        outcome: Outcome = None
        if self.writes:
            outcome = self._write(state, reason, parts)
        if self.parallel is not None:  # every rank learns what rank 0's write did
            outcome = self.parallel.share_outcome(outcome)
        self.schedule.saved(state.step, time.perf_counter())
        self._record(state, state.step, reason, outcome)

    def settle(self, state: TrainState) -> None:
        """Wait for the pending background write, share its outcome with every rank and
        record it (a collective under data parallelism; nothing when none is pending)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.thread is not None:
            pending.thread.join()
        outcome = pending.outcome
        if self.parallel is not None:
            outcome = self.parallel.share_outcome(outcome)
        self._record(state, pending.step, pending.reason, outcome)

    def flush(self, state: TrainState) -> None:
        """Wait for this rank's pending write without a collective (the run is ending, maybe
        after a failure, so the other ranks may be gone): rank 0 records its outcome."""
        pending, self.pending = self.pending, None
        if pending is None or pending.thread is None:
            return
        pending.thread.join()
        metrics = self.journal.metrics
        # after the loop's end metrics.jsonl is closed: open it again for the outcome's row
        reopened = contextlib.nullcontext() if metrics.is_open else metrics
        with reopened, contextlib.suppress(TrainingFailed):  # the run ends anyway
            self._record(state, pending.step, pending.reason, pending.outcome)

    def _start_write(
        self, state: TrainState, reason: str, parts: list[dict[str, Any]] | None
    ) -> None:
        """Rank 0: snapshot the checkpoint to host memory, write it on a thread."""
        state.rank_parts = parts
        try:
            payload = state.state_dict(fresh=True)  # each tensor copied to the host once
        finally:
            state.rank_parts = None
        frozen = attrs.evolve(state, last_eval=dict(state.last_eval), snapshot=payload)
        pending = PendingWrite(state.step, reason)

        def write() -> None:
            pending.outcome = self._write(frozen, reason, None)

        pending.thread = threading.Thread(target=write, name="trm-checkpoint", daemon=False)
        self.journal.metrics.sync()
        pending.thread.start()
        self.pending = pending

    def _record(self, state: TrainState, step: int, reason: str, outcome: Outcome) -> None:
        """What the write of the checkpoint of ``step`` did, for every rank alike."""
        if isinstance(outcome, WriteFailed):
            self._failed(state, step, reason, outcome)
            return
        self.failures = 0
        if outcome is not None:
            state.checkpoint_step = step
            self.journal.event(step, "checkpoint", quiet=True, reason=reason)
        elif not self.warned_unsaved:
            self.warned_unsaved = True
            self.journal.log(
                f"warning: step {step}: no checkpoint written — no plugin saves "
                "checkpoints (is checkpoint switched off?)"
            )

    def _write(self, state: TrainState, reason: str, parts: list[dict[str, Any]] | None) -> Outcome:
        """Rank 0's write through the hook: the path, None (no plugin saves), or what failed —
        any error of the hook, whether on the loop's thread or on the background writer's
        (where an error not caught here would end the thread and leave no outcome)."""
        state.rank_parts = parts
        try:
            if state.snapshot is None:  # a background write synced the metrics before
                self.journal.metrics.sync()
            return self.pm.hook.save_checkpoint(state=state, run_dir=self.run_dir, reason=reason)
        except Exception as exc:
            return WriteFailed.of(exc)
        finally:
            state.rank_parts = None

    def _failed(self, state: TrainState, step: int, reason: str, failure: WriteFailed) -> None:
        self.failures += 1
        self.journal.event(step, "checkpoint_failed", reason=reason, error=failure.error)
        kept = last_good(state)
        self.journal.log(
            f"warning: checkpoint at step {step} failed ({failure.error}); {kept} "
            f"({self.failures} of {MAX_CHECKPOINT_FAILURES} failures in a row stop the run)"
        )
        if self.failures >= MAX_CHECKPOINT_FAILURES:
            raise TrainingFailed(
                f"step {step}: {MAX_CHECKPOINT_FAILURES} checkpoint saves in a row "
                f"failed (last: {failure.error}); {kept} — {failure.what_to_do()}"
            )
