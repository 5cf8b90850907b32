"""The training loop: one function, read top to bottom.

``Trainer.fit`` opens the data, builds the model and optimizers, resumes if a checkpoint
exists, and then repeats the optimizer step: read the step's examples, run each micro-batch
through one supervision step of its rows' carry, accumulate gradients, update. Plugins see the
run through hooks (on_train_start, on_step, on_thermal_event, on_eval, on_out_of_memory,
save_checkpoint, on_train_end) and act on it only through ``TrainControl``.

A step is all or nothing: the carry is written back only after every micro-batch succeeded,
so a step that runs out of memory is undone (gradients dropped, RNG restored) and retried with
the micro-batch a plugin asks for — the same examples, the same exploration draws.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from trm.checkpoint_schedule import CheckpointSchedule
from trm.compile import compile_for_runtime
from trm.control import TrainControl
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex, TrainSampler
from trm.errors import TrmError
from trm.evaluate import autocast, evaluate, to_device
from trm.host_memory import reuse_freed_memory
from trm.metrics_log import MetricsLog
from trm.model import EMA, ACTLoss, TinyRecursiveModel, TRMCarry, build_optimizers, lr_at_step
from trm.oom import free_cached_memory, is_out_of_memory
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState, capture_rng, restore_rng, weights_sha256

MAX_CHECKPOINT_FAILURES = 3
PAUSE_SLICE_S = 0.25


class TrainingFailed(Exception):
    """The run cannot go on (non-finite loss, repeated checkpoint failures); exit code 1."""


def total_steps_for(spec: RunSpec, num_groups: int) -> int:
    """Steps of the whole schedule: ``max_steps``, else ``epochs`` over the train groups."""
    if spec.train.max_steps > 0:
        return spec.train.max_steps
    return max(1, math.ceil(spec.train.epochs * num_groups / spec.train.global_batch_size))


def dataset_shape(metadata: Any) -> dict[str, int]:
    """The dataset facts the model's shape depends on (kept in checkpoints)."""
    return {
        "seq_len": int(metadata.seq_len),
        "vocab_size": int(metadata.vocab_size),
        "num_puzzle_identifiers": int(metadata.num_puzzle_identifiers),
    }


def build_model(spec: RunSpec, shape: dict[str, int]) -> TinyRecursiveModel:
    """The TRM of ``spec.arch`` for a dataset of the given ``dataset_shape``."""
    return TinyRecursiveModel(spec.arch, **shape)


def fit_micro_batch(size: int, global_batch: int) -> int:
    """``size`` clamped to [1, global_batch]. It need not divide the global batch: the step's
    last micro-batch then holds the remaining rows (see :func:`accumulate_gradients`)."""
    return max(1, min(int(size), global_batch))


def accumulation_steps(micro_batch_size: int, global_batch: int) -> int:
    """How many micro-batches one optimizer step of ``global_batch`` rows runs."""
    return -(-global_batch // max(1, micro_batch_size))


def accumulate_gradients(
    model: TinyRecursiveModel,
    carry: TRMCarry,
    batch: dict[str, torch.Tensor],
    min_halt_steps: torch.Tensor,
    micro_batch_size: int,
    loss: str,
    divisor: int,
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> tuple[list[tuple[slice, TRMCarry]], dict[str, float]]:
    """Forward and backward over ``batch`` in micro-batches of ``micro_batch_size`` rows
    (the last one holds the remaining rows when the size does not divide the batch).

    Each micro-batch runs one supervision step on its rows of ``carry`` with its rows of
    ``min_halt_steps``; its loss sum is divided by ``divisor`` (the global batch size) before
    ``backward``, so the gradients accumulated in ``.grad`` (and the puzzle-embedding lookups)
    equal those of one pass over the whole batch. ``carry`` is not modified: the new rows come
    back as ``(rows, new_carry)`` pieces for the caller to write back with ``assign_rows``.
    Returns the pieces and the sums of the loss and the ACT metrics over all rows (``rows``
    counts the rows that ran).
    """
    total = carry.batch_size
    pieces: list[tuple[slice, TRMCarry]] = []
    sums: dict[str, float] = {"loss_sum": 0.0, "rows": 0.0}
    for start in range(0, total, micro_batch_size):
        rows = slice(start, min(total, start + micro_batch_size))
        sub_batch = {k: v[rows] for k, v in batch.items()}
        with autocast(device, dtype):
            new_carry, outputs = model(
                carry.index_rows(rows), sub_batch, min_halt_steps=min_halt_steps[rows]
            )
        loss_sum, metrics = ACTLoss.compute(
            outputs, new_carry.current_data["labels"], new_carry.halted, loss, steps=new_carry.steps
        )
        (loss_sum / divisor).backward()
        pieces.append((rows, new_carry))
        sums["loss_sum"] += float(loss_sum.detach())
        sums["rows"] += rows.stop - rows.start
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + float(value)
    return pieces, sums


class StopRequests:
    """SIGINT/SIGTERM handling: the first asks for a clean stop, a second SIGINT exits now."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.reason = "interrupted" if signum == signal.SIGINT else "terminated"
        # os.write, not print: a handler may run while the main thread is printing.
        os.write(
            2,
            b"\ntrm: stopping after this step and saving a checkpoint "
            b"(Ctrl-C again quits at once)\n",
        )


class Trainer:
    """Trains ``spec`` on ``data_dir`` into ``run_dir``; see :meth:`fit`.

    ``checkpoint_interval`` is ``(steps, seconds)`` from ``--checkpoint-every`` (one of them
    0); None uses ``train.checkpoint_interval_steps``, else about every ten minutes.
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
    ) -> None:
        self.spec = spec
        self.runtime = runtime
        self.pm = pm
        self.run_dir = run_dir
        self.data_dir = data_dir
        self.log = log
        self.resume = resume
        self.max_steps = max_steps
        self.device = torch.device(runtime.device)
        self.dtype = runtime.autocast_dtype
        if checkpoint_interval is not None:
            self.schedule = CheckpointSchedule(*checkpoint_interval)
        else:
            self.schedule = CheckpointSchedule(spec.train.checkpoint_interval_steps)
        self.metrics = MetricsLog(run_dir / "metrics.jsonl")
        self.checkpoint_failures = 0
        self.checkpoint_step: int | None = None

    # ---- setup -------------------------------------------------------------------------
    def _open_data(self) -> tuple[SplitIndex, SplitIndex | None]:
        train = SplitIndex(open_split(self.data_dir / self.spec.data.train_split))
        eval_path = self.data_dir / self.spec.data.eval_split
        evaluation = SplitIndex(open_split(eval_path)) if eval_path.exists() else None
        if evaluation is None:
            self.log(
                f"no {self.spec.data.eval_split!r} split in {self.data_dir}: "
                "training without evaluation"
            )
        return train, evaluation

    def _resume(self, state: TrainState) -> None:
        if self.resume == "never":
            return
        target = self.run_dir if self.resume == "auto" else Path(self.resume)
        payload = self.pm.hook.load_checkpoint(path=target, map_location="cpu")
        if payload is None:
            if self.resume != "auto":
                raise TrmError(f"--resume {self.resume}: no checkpoint found there")
            return
        where = f"checkpoint {payload.get('loaded_from', target)}"
        for note in state.load_state_dict(payload, where):
            self.log(f"warning: {note}")
        self.checkpoint_step = state.step
        self.log(f"resumed from step {state.step} ({state.samples} samples) of {where}")

    # ---- the loop ----------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train to the end of the schedule (or ``max_steps``); returns summary.json's content.

        Writes metrics.jsonl (continuing it on resume without gaps or repeats), checkpoints
        through ``save_checkpoint`` and summary.json. The summary's ``stopped`` is "finished",
        "max_steps", or the reason a stop was requested ("interrupted", "terminated", a
        plugin's reason); ``checkpoint_step`` is the step of the newest checkpoint written
        or resumed from. On TrainingFailed the summary says "failed" with the ``error``, and
        the error is raised.
        """
        spec, train_cfg = self.spec, self.spec.train
        if self.runtime.reuse_host_memory:
            reuse_freed_memory()
        torch.manual_seed(train_cfg.seed)
        train_index, eval_index = self._open_data()
        model = build_model(spec, dataset_shape(train_index.split.metadata)).to(self.device)
        compile_for_runtime(model, self.runtime)
        optimizers = build_optimizers(model, train_cfg)
        ema = EMA(model, train_cfg.ema_rate) if train_cfg.ema else None
        global_batch = train_cfg.global_batch_size
        state = TrainState(
            spec=spec,
            model=model,
            optimizers=optimizers,
            ema=ema,
            carry=None,
            run_dir=self.run_dir,
            total_steps=total_steps_for(spec, train_index.num_groups),
            micro_batch_size=spec.runtime.micro_batch_size or global_batch,
            data_dir=str(self.data_dir),
            dataset_shape=dataset_shape(train_index.split.metadata),
        )
        self._resume(state)
        sampler = TrainSampler(train_index, global_batch, train_cfg.seed)
        stop_step = state.total_steps
        if self.max_steps is not None:
            stop_step = min(stop_step, self.max_steps)
        if state.carry is None:
            template = to_device(train_index.gather(sampler.examples_for_step(0)), self.device)
            state.carry = model.initial_carry(template)
        self.metrics.continue_from(state.step)
        control = TrainControl()
        process = psutil.Process()
        started = time.perf_counter()
        stopped = "finished" if stop_step == state.total_steps else "max_steps"

        model.train()
        self.pm.hook.on_train_start(state=state, control=control)
        self._flush_messages(control)
        try:
            with StopRequests() as stops, self.metrics:
                while state.step < stop_step:
                    t0 = time.perf_counter()
                    batch = train_index.gather(sampler.examples_for_step(state.step))
                    sums = self._optimizer_step(state, batch, control)
                    state.step += 1
                    state.samples += int(sums["rows"])
                    record = self._step_record(state, sums, time.perf_counter() - t0, process)
                    self.metrics.write(record)
                    self.pm.hook.on_step(state=state, metrics=record, control=control)
                    self._dispatch_thermal_events(state, control)

                    at_end = state.step >= stop_step
                    reasons = list(control.checkpoint_reasons)
                    control.checkpoint_reasons.clear()
                    interval = train_cfg.eval_interval
                    # the schedule's end always evaluates; a --max-steps cut only on the interval
                    finished = state.step >= state.total_steps
                    eval_due = finished or (interval > 0 and state.step % interval == 0)
                    if eval_index is not None and eval_due:
                        reasons += self._evaluate(state, eval_index, control)
                    self._apply_micro_batch_request(state, control)
                    stop_reason = stops.reason or control.stop_reason
                    if self.schedule.due(state.step, time.perf_counter()):
                        reasons.append("interval")
                    if at_end or stop_reason:
                        reasons.insert(0, "end" if at_end else "stop")
                    if reasons:
                        state.wall_s_before += time.perf_counter() - started
                        started = time.perf_counter()
                        self._save(state, reasons[0])
                    self._announce_schedule(state)
                    self._flush_messages(control)
                    if stop_reason and not at_end:
                        stopped = stop_reason
                        break
                    self._pause(state, control, stops)
                    if stops.reason and not at_end:  # Ctrl-C during the pause
                        if self.checkpoint_step != state.step:
                            self._save(state, "stop")
                        stopped = stops.reason
                        break
        except TrainingFailed as exc:
            state.wall_s_before += time.perf_counter() - started
            self._write_summary(state, "failed", error=str(exc))
            raise
        state.wall_s_before += time.perf_counter() - started
        return self._write_summary(state, stopped)

    def _write_summary(
        self, state: TrainState, stopped: str, error: str | None = None
    ) -> dict[str, Any]:
        summary = {
            "stopped": stopped,
            "error": error,
            "steps": state.step,
            "total_steps": state.total_steps,
            "samples": state.samples,
            "wall_s": round(state.wall_s_before, 3),
            "best_exact_accuracy": state.best_exact_accuracy,
            "best_step": state.best_step,
            "final_exact_accuracy": state.last_eval.get("exact_accuracy"),
            "final_cell_accuracy": state.last_eval.get("cell_accuracy"),
            "final_weights_sha256": weights_sha256(state.model),
            "checkpoint_step": self.checkpoint_step,
            "micro_batch_size": state.micro_batch_size,
            "device": self.runtime.device,
            "precision": self.runtime.precision,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.pm.hook.on_train_end(state=state, summary=summary)
        return summary

    # ---- pieces of a step --------------------------------------------------------------
    def _optimizer_step(
        self, state: TrainState, batch: dict[str, np.ndarray], control: TrainControl
    ) -> dict[str, float]:
        """One optimizer update over the global batch; an out-of-memory step is retried.

        On out of memory the step is undone (gradients dropped, RNG restored, carry never
        written) and ``on_out_of_memory`` asks the plugins for a smaller micro-batch; the
        same step then runs again. Without a smaller micro-batch the run fails.
        """
        rng = capture_rng(self.device)
        while True:
            try:
                return self._attempt_step(state, batch)
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                error = exc.with_traceback(None)  # drop the frames that hold activations
            self._recover_from_oom(state, error, rng, control)

    def _attempt_step(self, state: TrainState, batch: dict[str, np.ndarray]) -> dict[str, float]:
        model, spec = state.model, self.spec
        global_batch = spec.train.global_batch_size
        device_batch = to_device(batch, self.device)
        min_halt_steps = model.draw_min_halt_steps(global_batch, self.device)
        for opt in state.optimizers:
            opt.zero_grad(set_to_none=True)
        pieces, sums = accumulate_gradients(
            model,
            state.carry,
            device_batch,
            min_halt_steps,
            state.micro_batch_size,
            spec.arch.loss,
            global_batch,
            self.device,
            self.dtype,
        )
        if not math.isfinite(sums["loss_sum"]):
            raise TrainingFailed(
                f"step {state.step + 1}: the loss is not finite ({sums['loss_sum']}); the run "
                f"stops and the last good checkpoint (step {self.checkpoint_step}) is kept — "
                "lower train.lr or check the data, then resume"
            )
        for rows, new_carry in pieces:
            state.carry.assign_rows(rows, new_carry)
        del pieces
        try:
            for opt in state.optimizers:
                for group in opt.param_groups:
                    group["lr"] = lr_at_step(
                        state.step, spec.train, state.total_steps, group["base_lr"]
                    )
                opt.step()
            if state.ema is not None:
                state.ema.update(model)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            raise TrainingFailed(
                f"step {state.step + 1}: out of memory while updating the weights, which may "
                f"now be partly updated, so the run stops; the checkpoint of step "
                f"{self.checkpoint_step} is intact — resume with a smaller "
                "runtime.micro_batch_size or a smaller model"
            ) from None
        sums["lr"] = lr_at_step(state.step, spec.train, state.total_steps)
        return sums

    def _recover_from_oom(
        self,
        state: TrainState,
        error: BaseException,
        rng: dict[str, Any],
        control: TrainControl,
    ) -> None:
        step = state.step + 1
        for opt in state.optimizers:
            opt.zero_grad(set_to_none=True)
        restore_rng(rng)
        old = state.micro_batch_size
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        control.micro_batch_request = None
        self.pm.hook.on_out_of_memory(state=state, error=error, control=control)
        self._flush_messages(control)
        request, control.micro_batch_request = control.micro_batch_request, None
        global_batch = self.spec.train.global_batch_size
        new = old if request is None else fit_micro_batch(request[0], global_batch)
        if new >= old:
            if old == 1:
                why = "the micro-batch is already 1"
            elif request is None:
                why = "no plugin reduced the micro-batch (is memory-guard off?)"
            else:
                why = "the micro-batch cannot shrink further"
            raise TrainingFailed(
                f"step {step}: out of memory with micro-batch {old} ({detail}); {why}. The "
                f"checkpoint of step {self.checkpoint_step} is intact — free memory or use a "
                "smaller model, then resume"
            )
        self._event(step, "out_of_memory", quiet=True, micro_batch_size=old, error=detail)
        self.log(f"step {step}: out of memory at micro-batch {old} ({detail}); retrying the step")
        self._set_micro_batch(state, new, request[1], step)

    def _step_record(
        self, state: TrainState, sums: dict[str, float], step_s: float, process: psutil.Process
    ) -> dict[str, Any]:
        count = max(sums.get("count", 0.0), 1.0)
        mem_device_mb = None
        if self.device.type == "cuda":
            mem_device_mb = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
        elif self.device.type == "mps":
            mem_device_mb = round(torch.mps.current_allocated_memory() / 2**20, 1)
        return {
            "step": state.step,
            "samples": state.samples,
            "samples_per_s": round(self.spec.train.global_batch_size / max(step_s, 1e-9), 2),
            "loss": sums["loss_sum"] / self.spec.train.global_batch_size,
            "lr": sums["lr"],
            "mem_host_mb": round(process.memory_info().rss / 2**20, 1),
            "mem_device_mb": mem_device_mb,
            "train_exact_accuracy": sums.get("exact_correct", 0.0) / count,
            "train_cell_accuracy": sums.get("cell_correct", 0.0) / count,
            "halted": int(sums.get("count", 0.0)),
            "mean_halt_steps": sums.get("steps", 0.0) / count,
            "micro_batch_size": state.micro_batch_size,
        }

    def _evaluate(
        self, state: TrainState, eval_index: SplitIndex, control: TrainControl
    ) -> list[str]:
        """Evaluate (EMA weights when kept), write the row, call on_eval.

        Returns the checkpoint reasons it gives: ``["best"]`` on a new best, else none.

        Out of memory during evaluation halves the evaluation batch and tries again.
        """
        arch, batch_size = self.spec.arch, state.micro_batch_size
        while True:
            try:
                args = (
                    eval_index,
                    arch.halt_max_steps,
                    batch_size,
                    self.device,
                    self.dtype,
                    self.spec.train.eval_max_examples,
                )
                if state.ema is not None:
                    with state.ema.swap_in(state.model):
                        result = evaluate(state.model, *args)
                else:
                    result = evaluate(state.model, *args)
                break
            except Exception as exc:
                if not is_out_of_memory(exc) or batch_size == 1:
                    raise
            free_cached_memory(self.device)
            self.log(f"out of memory in evaluation: batch {batch_size} -> {batch_size // 2}")
            batch_size //= 2
        state.last_eval = result
        improved = state.best_step == 0 or result["exact_accuracy"] > state.best_exact_accuracy
        if improved:
            state.best_exact_accuracy = result["exact_accuracy"]
            state.best_step = state.step
        record = {"kind": "eval", "step": state.step, **result}
        self.metrics.write(record)
        self.pm.hook.on_eval(state=state, metrics=record, control=control)
        return ["best"] if improved else []

    def _save(self, state: TrainState, reason: str) -> None:
        """Checkpoint through ``save_checkpoint``; a failure warns, repeated failures stop."""
        if not all(bool(torch.isfinite(t).all()) for t in state.model.parameters()):
            raise TrainingFailed(
                f"step {state.step}: the weights are no longer finite; the run stops and the "
                f"last good checkpoint (step {self.checkpoint_step}) is kept — lower train.lr"
            )
        self.metrics.sync()
        try:
            path = self.pm.hook.save_checkpoint(state=state, run_dir=self.run_dir, reason=reason)
        except OSError as exc:
            self.checkpoint_failures += 1
            self._event(state.step, "checkpoint_failed", reason=reason, error=str(exc))
            self.log(
                f"warning: checkpoint at step {state.step} failed ({exc}); the previous "
                f"checkpoint (step {self.checkpoint_step}) is intact"
            )
            if self.checkpoint_failures >= MAX_CHECKPOINT_FAILURES:
                raise TrainingFailed(
                    f"step {state.step}: {MAX_CHECKPOINT_FAILURES} checkpoint saves in a row "
                    f"failed (last: {exc}); the checkpoint of step {self.checkpoint_step} is "
                    "intact — free disk space or fix the run directory, then resume"
                ) from exc
            return
        self.checkpoint_failures = 0
        self.schedule.saved(state.step, time.perf_counter())
        if path is not None:
            self.checkpoint_step = state.step

    def _announce_schedule(self, state: TrainState) -> None:
        line = self.schedule.describe_once(state.step, time.perf_counter())
        if line:
            self.log(line)

    def _apply_micro_batch_request(self, state: TrainState, control: TrainControl) -> None:
        if control.micro_batch_request is not None:
            size, reason = control.micro_batch_request
            control.micro_batch_request = None
            global_batch = self.spec.train.global_batch_size
            self._set_micro_batch(state, fit_micro_batch(size, global_batch), reason, state.step)

    def _set_micro_batch(self, state: TrainState, size: int, reason: str, step: int) -> None:
        if size == state.micro_batch_size:
            return
        global_batch = self.spec.train.global_batch_size
        self.log(
            f"step {step}: micro-batch {state.micro_batch_size} -> {size} "
            f"(accumulation {accumulation_steps(size, global_batch)}, global batch "
            f"{global_batch}): {reason}"
        )
        self._event(
            step, "micro_batch", old=state.micro_batch_size, new=size, reason=reason, quiet=True
        )
        state.micro_batch_size = size

    def _dispatch_thermal_events(self, state: TrainState, control: TrainControl) -> None:
        while control.thermal_events:
            event = control.thermal_events.pop(0)
            self._event(
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
            self.pm.hook.on_thermal_event(event=event, control=control)

    def _pause(self, state: TrainState, control: TrainControl, stops: StopRequests) -> None:
        """Sleep as plugins asked, in short slices so a stop request ends the pause."""
        if control.pause_s <= 0:
            return
        seconds, reason = control.pause_s, control.pause_reason
        control.pause_s, control.pause_reason = 0.0, ""
        self._event(state.step, "pause", seconds=seconds, reason=reason, quiet=True)
        self.log(f"pausing {seconds:.0f} s: {reason}")
        deadline = time.perf_counter() + seconds
        while stops.reason is None and (left := deadline - time.perf_counter()) > 0:
            time.sleep(min(left, PAUSE_SLICE_S))

    def _event(self, step: int, event: str, quiet: bool = False, **fields: Any) -> None:
        """Record an event row in metrics.jsonl (and show it unless ``quiet``)."""
        self.metrics.write({"kind": "event", "step": step, "event": event, **fields})
        if not quiet:
            details = ", ".join(f"{k}={v}" for k, v in fields.items())
            self.log(f"step {step}: {event.replace('_', ' ')} ({details})")

    def _flush_messages(self, control: TrainControl) -> None:
        for message in control.messages:
            self.log(message)
        control.messages.clear()
