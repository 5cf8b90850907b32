"""The training loop: ``Trainer.fit`` reads top to bottom — setup, the while loop, one
after-step function.

Each optimizer step reads the step's examples (a pure function of the seed and the step),
runs each micro-batch through one supervision step of its rows' carry, accumulates gradients
and updates (:mod:`~trm.loop.step`; out of memory is undone and retried by
:mod:`~trm.loop.oom_retry`). Between steps, :meth:`Trainer.after_step` does, in this order:
``on_step``, thermal events, evaluation when due, a requested micro-batch, recursion depth
and halting exploration, activation checkpointing, host threads, checkpoint
(:mod:`~trm.loop.checkpoints`), the plugins' messages, then a requested pause. Plugins see
the run through hooks and act on it only through ``TrainControl``.

Under torchrun every rank runs this loop on its rows of each global batch
(:mod:`~trm.loop.data_parallel`): the ranks agree after each step whether to stop,
checkpoint or pause, so they always take the same steps; rank 0 alone writes metrics.jsonl,
summary.json and the checkpoints.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from trm.control import TrainControl
from trm.data.reader import ReaderChoice, choose_reader
from trm.data.shape import read_shape
from trm.device import distributed
from trm.device.compile import is_compiled
from trm.device.host_memory import reuse_freed_memory
from trm.evaluation.attempts import at_attempts_key
from trm.evaluation.evaluate import evaluate_in_run
from trm.evaluation.per_task import tasks_scorer
from trm.hardware import HardwareProfile
from trm.init_from import start_from_weights
from trm.loop import requests
from trm.loop.checkpoints import Checkpointer, CheckpointSchedule
from trm.loop.compile_record import StepClock, follow_checkpoint_compile
from trm.loop.data_parallel import DataParallel, Decision
from trm.loop.device_failure import device_failure, is_device_failure
from trm.loop.oom_retry import take_step
from trm.loop.setup import RunData, first_carry, new_state, open_data, resume
from trm.loop.signals import StopRequests
from trm.loop.step import StepSetup, step_record
from trm.metrics_log import Journal, MetricsLog, per_task_figures, read_metrics
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState, weights_sha256


class Stopwatch:
    """The run's training wall time: what earlier processes trained plus this one's."""

    def __init__(self, before_s: float) -> None:
        self.before_s = before_s
        self.started_s = time.perf_counter()

    def total_s(self) -> float:
        return self.before_s + time.perf_counter() - self.started_s


class Trainer:
    """Trains ``spec`` on ``data_dir`` into ``run_dir``; see :meth:`fit`.

    ``resume`` is "auto" (the run's newest checkpoint), "never" or a checkpoint path;
    ``max_steps`` stops at that step (the schedule is kept); ``checkpoint_interval`` is
    ``(steps, seconds)`` from ``--checkpoint-every`` (one of them 0), None for
    ``train.checkpoint_interval_steps``, else about every ten minutes. ``on_accepted`` runs
    once the state is built and any checkpoint accepted, before anything is written (``trm
    run`` writes the run's record there, so a refused resume changes no file). ``init_from``
    (``--init-from``) starts a fresh run from those weights (``trm.init_from``).
    ``step_clock`` times the steps for the compile ledger (:mod:`trm.loop.compile_record`);
    ``trm run`` passes the one its time budget's timing added compile seconds to.
    """

    def __init__(
        self,
        spec: RunSpec,
        runtime: RuntimeChoice,
        pm: TrmPluginManager,
        run_dir: Path,
        data_dir: Path,
        log: Callable[[str], None],
        resume: str = "auto",
        max_steps: int | None = None,
        checkpoint_interval: tuple[int, float] | None = None,
        on_accepted: Callable[[TrainState], None] | None = None,
        reader: ReaderChoice | None = None,
        init_from: Path | None = None,
        step_clock: StepClock | None = None,
    ) -> None:
        self.spec, self.runtime, self.pm = spec, runtime, pm
        self.init_from = init_from
        self.run_dir, self.data_dir, self.resume_from = run_dir, data_dir, resume
        self.max_steps = max_steps
        self.on_accepted = on_accepted
        self.reader = reader
        self.data_wait_s = 0.0
        self.parallel = DataParallel(distributed.current(), spec.train.global_batch_size)
        self.setup = StepSetup(
            placement=runtime.placement(),
            loss=spec.arch.loss,
            global_batch=spec.train.global_batch_size,
            parallel=self.parallel if self.parallel.active else None,
            task_names=tuple(entry.task for entry in spec.data.mix),
            candidates=spec.train.latent_candidates,
        )
        writes = self.parallel.world.is_first  # rank 0 alone writes the run's files
        self.journal = Journal(MetricsLog(run_dir / "metrics.jsonl" if writes else None), log)
        interval = checkpoint_interval or (spec.train.checkpoint_interval_steps,)
        schedule = CheckpointSchedule(*interval)
        self.checkpoints = Checkpointer(pm, run_dir, schedule, self.journal, self.parallel)
        self.world_note = ""
        self.process = psutil.Process()
        self.stop_step = 0
        self.clock = Stopwatch(0.0)
        self.step_clock = step_clock or StepClock(runtime.compile_key)

    def fit(self) -> dict[str, Any]:
        """Train to the end of the schedule (or ``max_steps``); returns summary.json's content.

        Writes metrics.jsonl (continued on resume without gaps or repeats), checkpoints
        through ``save_checkpoint`` and summary.json, whose ``stopped`` is "finished",
        "max_steps", a stop's reason ("interrupted", "terminated", a plugin's), or "failed"
        (with ``error``; the error is raised). ``on_train_end`` runs however the loop ends.
        A checkpoint that does not fit the run raises TrmError before anything is written.
        """
        if self.runtime.reuse_host_memory:
            reuse_freed_memory()
        state, data = self.setup_run()
        first_carry(state, data, self.setup.placement, self.parallel.rows)
        if self.on_accepted is not None:
            self.on_accepted(state)
        self.stop_step = min(state.total_steps, self.max_steps or state.total_steps)
        self.journal.metrics.continue_from(state.step)
        control, clock = TrainControl(), Stopwatch(state.wall_s_before)
        self.clock = clock
        stopped = "finished" if self.stop_step == state.total_steps else "max_steps"
        error: str | None = None
        state.model.train()
        try:
            quits = not distributed.launched_by_torchrun()
            with StopRequests(second_sigint_quits=quits) as stops, self.journal.metrics:
                data.reader.start(
                    self.parallel.examples(data.sampler.examples_for_step), state.step
                )
                self.announce_world(state)
                self.pm.hook.on_train_start(state=state, control=control)
                requests.apply_recursion_requests(state, control, self.journal)
                requests.apply_activation_checkpointing_request(state, control, self.journal)
                requests.apply_threads_request(state, control, self.journal)
                self.journal.show(control)
                while state.step < self.stop_step:
                    record = self.take_step(state, data, control)
                    reason = self.after_step(state, data, record, control, stops, clock)
                    if reason is not None:
                        stopped = reason
                        break
        except BaseException as exc:
            stopped = "quit" if isinstance(exc, KeyboardInterrupt) else "failed"
            if is_device_failure(exc):  # one line and the last good checkpoint, no traceback
                self.checkpoints.flush(state)  # a write in the background still finishes
                failure = device_failure(exc, state, self.runtime.device)
                error = str(failure)
                raise failure from exc
            error = str(exc) or type(exc).__name__
            raise
        finally:
            data.reader.close()
            self.checkpoints.flush(state)
            state.wall_s_before = clock.total_s()
            summary = self.finish(state, stopped, error, clock)
        return summary

    def setup_run(self) -> tuple[TrainState, RunData]:
        """Open the data, build the state, resume (TrmError when a checkpoint does not fit)."""
        shape = read_shape(self.data_dir, self.spec.data.train_split)
        choice = self.reader or choose_reader(self.spec, shape, HardwareProfile())
        runtime = self.runtime
        data = open_data(
            self.spec,
            self.data_dir,
            self.pm,
            choice,
            runtime.device,
            self.journal.log,
            runtime.backend,
        )
        local = self.parallel.local_batch if self.parallel.active else None
        try:
            optimizer = self.pm.dense_optimizer(self.spec.train.optimizer)
            state = new_state(
                self.spec, self.runtime, data, self.run_dir, self.data_dir, local, optimizer
            )
            self.parallel.attach(state.optimizers)
            self.world_note = resume(
                state, self.pm, self.resume_from, self.journal.log, self.parallel
            )
            if self.init_from is not None:
                start_from_weights(state, self.pm, self.init_from, self.journal.log)
            if self.runtime.compile_by_planner:
                follow_checkpoint_compile(state, self.journal.log, self.runtime.graphs)
        except BaseException:
            data.reader.close()
            raise
        return state, data

    def announce_world(self, state: TrainState) -> None:
        """Say how many processes train, and loudly when a checkpoint of another number of
        processes was resumed (a log line and a ``world_size_changed`` event)."""
        world = self.parallel.world
        if world.distributed:
            self.journal.log(
                f"data parallel: {world.size} processes ({world.local_size} on this node), "
                f"{self.parallel.local_batch} rows of the global batch "
                f"{self.spec.train.global_batch_size} each"
            )
        if self.world_note:
            self.journal.log(f"warning: {self.world_note}")
            self.journal.event(
                state.step,
                "world_size_changed",
                quiet=True,
                world_size=world.size,
                note=self.world_note,
            )

    def take_step(self, state: TrainState, data: RunData, control: TrainControl) -> dict[str, Any]:
        """One optimizer step and its metrics row (written to metrics.jsonl); under data
        parallelism the row is the global batch's and holds ``collective_s``, the step's
        seconds in collectives."""
        started_s = time.perf_counter()
        collective_before_s = distributed.collective_seconds()
        batch = data.reader.batch(state.step)
        waited_s = time.perf_counter() - started_s
        self.data_wait_s += waited_s
        backend, device = self.runtime.backend, self.setup.device
        backend.begin_step(device)
        sums = take_step(state, batch, self.setup, self.pm, control, self.journal)
        state.step += 1
        state.samples += int(sums["rows"])
        step_s = time.perf_counter() - started_s
        self.step_clock.add(step_s, (state.model.H_cycles, state.model.L_cycles))
        record = step_record(
            state,
            sums,
            step_s,
            self.process.memory_info().rss,
            backend.step_peak_mb(device),
        )
        record["data_wait_s"] = round(waited_s, 4)
        record["wall_s"] = round(self.clock.total_s(), 3)
        if self.parallel.active:
            record["collective_s"] = round(
                distributed.collective_seconds() - collective_before_s, 4
            )
        record.update(state.model.recursion_in_force())
        self.journal.metrics.write(record)
        return record

    def after_step(
        self,
        state: TrainState,
        data: RunData,
        record: dict[str, Any],
        control: TrainControl,
        stops: StopRequests,
        clock: Stopwatch,
    ) -> str | None:
        """Everything between two steps, in the module docstring's order; returns why the
        run stops now (None: go on)."""
        self.pm.hook.on_step(state=state, metrics=record, control=control)
        requests.dispatch_thermal_events(state, control, self.pm, self.journal)
        asked = list(control.checkpoint_reasons)
        control.checkpoint_reasons.clear()
        if data.evaluation is not None and self.eval_due(state):
            asked += evaluate_in_run(
                state,
                data.evaluation,
                self.setup.placement,
                self.pm,
                control,
                self.journal,
                data.task_metrics,
                data.task_evaluation,
                self.score_tasks(data),
            )
        requests.apply_micro_batch_request(state, control, self.journal)
        requests.apply_recursion_requests(state, control, self.journal)
        requests.apply_activation_checkpointing_request(state, control, self.journal)
        requests.apply_threads_request(state, control, self.journal)
        at_end = state.step >= self.stop_step
        stop = None if at_end else stops.reason or control.stop_reason
        reason = self.checkpoints.reason_now(state, asked, at_end, stop is not None)
        if self.parallel.active:
            stop, reason = self.agree(control, stop, reason, at_end)
        if reason is not None:
            state.wall_s_before = clock.total_s()
            self.checkpoints.save(state, reason)
        self.journal.show(control)
        if stop is not None or at_end:
            return stop
        paused = control.pause_s > 0  # agreed: the same on every rank
        if requests.pause(state, control, stops, self.journal):  # a stop ended the pause
            if self.parallel.active:  # the others learn of it after their pause
                self.parallel.agree(Decision(stop=stops.reason))
            self.checkpoints.save(state, "stop")
            return stops.reason
        if paused and self.parallel.active:  # did a stop end another rank's pause?
            stop = self.parallel.agree(Decision(stop=stops.reason)).stop
            if stop is not None:
                self.checkpoints.save(state, "stop")
                return stop
        return None

    def agree(
        self,
        control: TrainControl,
        stop: str | None,
        reason: str | None,
        at_end: bool,
    ) -> tuple[str | None, str | None]:
        """Every rank's stop, checkpoint and pause, agreed (one small all-reduce): a stop or a
        checkpoint any rank wants, and the longest pause any rank asked for."""
        mine = Decision(stop, reason, control.pause_s, control.pause_reason)
        agreed = self.parallel.agree(mine)
        # a pause longer than the collective timeout would make the waiting ranks fail
        control.pause_s = min(agreed.pause_s, distributed.collective_timeout_s() / 2)
        control.pause_reason = agreed.pause_reason
        if agreed.stop is not None and not at_end:
            return agreed.stop, "stop"
        return None, ("end" if at_end else agreed.checkpoint)

    def score_tasks(self, data: RunData) -> Any:
        """A mix's per-task scoring for ``evaluate_in_run`` (None: one dataset)."""
        if data.tasks is None:
            return None
        halt_max_steps = self.spec.arch.halt_max_steps
        examples = self.spec.train.eval_max_examples
        return tasks_scorer(data.tasks, halt_max_steps, self.setup.placement, examples)

    def eval_due(self, state: TrainState) -> bool:
        """At the schedule's end always; otherwise every ``train.eval_interval`` steps."""
        interval = self.spec.train.eval_interval
        return state.step >= state.total_steps or (interval > 0 and state.step % interval == 0)

    def check_health(self) -> list[dict[str, Any]]:
        """Ask the plugins what they find wrong in the run's metrics.jsonl, earlier processes'
        rows included (``run_findings``: the ``report`` plugin's leak and slowdown
        detectors); each finding is also a line in the run's output. A check's own failure
        is a warning, never the run's. Under data parallelism only rank 0 (which writes
        metrics.jsonl) checks."""
        if not self.parallel.world.is_first:
            return []
        try:
            rows = read_metrics(self.run_dir / "metrics.jsonl")
            answers = self.pm.hook.run_findings(rows=rows)
        except Exception as exc:  # the run's result matters more than its health check
            self.journal.log(f"warning: the leak and slowdown checks failed ({exc})")
            return []
        findings = [finding for answer in reversed(answers) for finding in answer or ()]
        for finding in findings:
            self.journal.log(finding.line())
        return [finding.to_json() for finding in findings]

    def finish(
        self, state: TrainState, stopped: str, error: str | None, clock: Stopwatch
    ) -> dict[str, Any]:
        """Write summary.json (rank 0) and call ``on_train_end``; returns the summary.

        ``data_wait_share`` is the share of this process's training time the loop spent
        waiting for its batches; ``findings`` what the plugins found wrong in the whole run's
        metrics (:meth:`check_health`). ``world_size`` counts the processes
        that trained; under data parallelism ``ranks_agree`` says whether every rank ended with
        the same weights (checked when the ranks ended together, else None)."""
        process_s = max(clock.total_s() - clock.before_s, 1e-9)
        try:
            digest: str | None = weights_sha256(state.model)
        except Exception:  # a failed device cannot give its weights back: no fingerprint
            if stopped != "failed":
                raise
            digest = None
        summary = {
            "stopped": stopped,
            "error": error,
            "steps": state.step,
            "total_steps": state.total_steps,
            "samples": state.samples,
            "wall_s": round(state.wall_s_before, 3),
            "best_exact_accuracy": state.best_exact_accuracy if state.best_step else None,
            "best_step": state.best_step,
            "best_metric": state.best_metric,
            "best_value": state.best_value if state.best_step else None,
            "final_exact_accuracy": state.last_eval.get("exact_accuracy"),
            "final_cell_accuracy": state.last_eval.get("cell_accuracy"),
            **_final_retried(state),
            "final_weights_sha256": digest,
            "checkpoint_step": state.checkpoint_step,
            "micro_batch_size": state.micro_batch_size,
            "device": self.runtime.device,
            "backend": self.runtime.backend_name,
            "precision": self.runtime.precision,
            "data_wait_s": round(self.data_wait_s, 3),
            "data_wait_share": round(self.data_wait_s / process_s, 4),
            "findings": self.check_health(),
            "world_size": self.parallel.world.size,
        }
        tasks = per_task_figures(state.last_eval)
        if tasks:
            summary["final_tasks"] = tasks
        if self.parallel.active:
            together = stopped not in ("failed", "quit")  # else a rank may be gone
            agree = self.parallel.weights_agree(state.model, digest) if together else None
            summary["ranks_agree"] = agree
            if agree is False:
                self.journal.log("warning: the ranks ended with different weights")
        if self.parallel.world.is_first:
            try:
                text = json.dumps(summary, indent=2) + "\n"
                (self.run_dir / "summary.json").write_text(text, encoding="utf-8")
            except OSError as exc:
                self.journal.log(f"warning: summary.json could not be written ({exc})")
        if self.parallel.world.is_first and stopped != "failed":
            self.step_clock.record(is_compiled(state.model))
        self.pm.hook.on_train_end(state=state, summary=summary)
        return summary


def _final_retried(state: TrainState) -> dict[str, Any]:
    """With ``train.eval_attempts`` K above 1: ``eval_attempts`` and the last evaluation's
    exact accuracy with K attempts as ``final_exact_accuracy@K`` (nothing with one attempt,
    so such a run's summary keeps its keys)."""
    attempts = state.spec.train.eval_attempts
    if attempts <= 1:
        return {}
    key = at_attempts_key(attempts)
    return {"eval_attempts": attempts, f"final_{key}": state.last_eval.get(key)}
