"""The training loop: one function, read top to bottom.

``Trainer.fit`` opens the data, builds the model and optimizers, resumes if a checkpoint
exists, and then repeats the optimizer step: read the step's examples, run each micro-batch
through one supervision step of its rows' carry, accumulate gradients, update. Plugins see the
run through hooks (on_train_start, on_step, on_eval, save_checkpoint, on_train_end) and act
on it only through ``TrainControl``.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from trm.control import TrainControl
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex, TrainSampler
from trm.errors import TrmError
from trm.evaluate import autocast, evaluate, to_device
from trm.model import EMA, ACTLoss, TinyRecursiveModel, build_optimizers, lr_at_step
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState, weights_sha256

DEFAULT_CHECKPOINT_INTERVAL_S = 600.0


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


class Trainer:
    """Trains ``spec`` on ``data_dir`` into ``run_dir``; see :meth:`fit`."""

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
        load_state(state, payload)
        self.log(f"resumed from step {state.step} ({state.samples} samples)")

    # ---- the loop ----------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train to the end of the schedule (or ``max_steps``); returns summary.json's content.

        Writes metrics.jsonl (continuing it on resume without gaps or repeats), checkpoints
        through ``save_checkpoint`` and summary.json. The summary's ``stopped`` is "finished",
        "max_steps", or the reason a stop was requested ("interrupted", a plugin's reason).
        """
        spec, train_cfg = self.spec, self.spec.train
        torch.manual_seed(train_cfg.seed)
        train_index, eval_index = self._open_data()
        model = build_model(spec, dataset_shape(train_index.split.metadata)).to(self.device)
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
        metrics_path = self.run_dir / "metrics.jsonl"
        truncate_metrics(metrics_path, state.step)
        control = TrainControl()
        process = psutil.Process()
        started = time.perf_counter()
        last_checkpoint = started
        checkpoint_failures = 0
        stopped = "finished" if stop_step == state.total_steps else "max_steps"

        model.train()
        self.pm.hook.on_train_start(state=state, control=control)
        self._flush_messages(control)
        with StopRequests() as stops, metrics_path.open("a", encoding="utf-8") as metrics_file:
            while state.step < stop_step:
                t0 = time.perf_counter()
                examples = sampler.examples_for_step(state.step)
                batch = train_index.gather(examples)
                sums = self._optimizer_step(state, batch)
                state.step += 1
                state.samples += global_batch
                step_s = time.perf_counter() - t0
                record = self._step_record(state, sums, step_s, process)
                metrics_file.write(json.dumps(record) + "\n")
                metrics_file.flush()
                self.pm.hook.on_step(state=state, metrics=record, control=control)

                at_end = state.step >= stop_step
                if eval_index is not None and (
                    at_end
                    or (train_cfg.eval_interval and state.step % train_cfg.eval_interval == 0)
                ):
                    eval_record = self._evaluate(state, eval_index)
                    metrics_file.write(json.dumps(eval_record) + "\n")
                    metrics_file.flush()
                    self.pm.hook.on_eval(state=state, metrics=eval_record, control=control)

                reasons = list(control.checkpoint_reasons)
                control.checkpoint_reasons.clear()
                now = time.perf_counter()
                interval = train_cfg.checkpoint_interval_steps
                if (interval and state.step % interval == 0) or (
                    not interval and now - last_checkpoint >= DEFAULT_CHECKPOINT_INTERVAL_S
                ):
                    reasons.append("interval")
                stop_reason = stops.reason or control.stop_reason
                if at_end or stop_reason:
                    reasons.append("end" if at_end else "stop")
                if reasons:
                    state.wall_s_before += now - started
                    started = now
                    if self._checkpoint(state, reasons[0]):
                        checkpoint_failures = 0
                    else:
                        checkpoint_failures += 1
                        if checkpoint_failures >= 3:
                            raise TrainingFailed(
                                f"step {state.step}: three checkpoint saves in a row failed; "
                                "free disk space or choose another --out, then resume"
                            )
                    last_checkpoint = now
                self._flush_messages(control)
                if stop_reason and not at_end:
                    stopped = stop_reason
                    break
                if control.pause_s > 0:
                    self.log(f"pausing {control.pause_s:.0f} s: {control.pause_reason}")
                    time.sleep(control.pause_s)
                    control.pause_s, control.pause_reason = 0.0, ""
                if control.micro_batch_request is not None:
                    self._set_micro_batch(state, *control.micro_batch_request)
                    control.micro_batch_request = None

        state.wall_s_before += time.perf_counter() - started
        summary = {
            "stopped": stopped,
            "steps": state.step,
            "total_steps": state.total_steps,
            "samples": state.samples,
            "wall_s": round(state.wall_s_before, 3),
            "best_exact_accuracy": state.best_exact_accuracy,
            "final_exact_accuracy": state.last_eval.get("exact_accuracy"),
            "final_cell_accuracy": state.last_eval.get("cell_accuracy"),
            "final_weights_sha256": weights_sha256(model),
            "device": self.runtime.device,
            "precision": self.runtime.precision,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.pm.hook.on_train_end(state=state, summary=summary)
        return summary

    # ---- pieces of a step --------------------------------------------------------------
    def _optimizer_step(self, state: TrainState, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One optimizer update over the global batch, split into micro-batches.

        Each micro-batch runs one supervision step on its rows of the carry; the loss sum is
        divided by the global batch size so the accumulated gradient equals the full batch's.
        """
        model, global_batch = state.model, self.spec.train.global_batch_size
        micro = state.micro_batch_size
        device_batch = to_device(batch, self.device)
        min_halt_steps = model.draw_min_halt_steps(global_batch, self.device)
        for opt in state.optimizers:
            opt.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for start in range(0, global_batch, micro):
            rows = slice(start, min(global_batch, start + micro))
            carry = state.carry.index_rows(rows)
            sub_batch = {k: v[rows] for k, v in device_batch.items()}
            with autocast(self.device, self.dtype):
                carry, outputs = model(carry, sub_batch, min_halt_steps=min_halt_steps[rows])
            loss_sum, metrics = ACTLoss.compute(
                outputs,
                carry.current_data["labels"],
                carry.halted,
                self.spec.arch.loss,
                steps=carry.steps,
            )
            (loss_sum / global_batch).backward()
            state.carry.assign_rows(rows, carry)
            sums["loss_sum"] = sums.get("loss_sum", 0.0) + float(loss_sum.detach())
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        if not math.isfinite(sums["loss_sum"]):
            raise TrainingFailed(
                f"step {state.step + 1}: the loss is not finite ({sums['loss_sum']}); "
                "the last good checkpoint is kept — lower train.lr or check the data"
            )
        for opt in state.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr_at_step(
                    state.step, self.spec.train, state.total_steps, group["base_lr"]
                )
            opt.step()
        lr = lr_at_step(state.step, self.spec.train, state.total_steps)
        if state.ema is not None:
            state.ema.update(model)
        sums["lr"] = lr
        return sums

    def _step_record(
        self, state: TrainState, sums: dict[str, float], step_s: float, process: psutil.Process
    ) -> dict[str, Any]:
        count = max(sums.get("count", 0.0), 1.0)
        mem_device_mb = None
        if self.device.type == "cuda":
            mem_device_mb = round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)
        return {
            "step": state.step,
            "samples": state.samples,
            "samples_per_s": round(self.spec.train.global_batch_size / step_s, 2),
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

    def _evaluate(self, state: TrainState, eval_index: SplitIndex) -> dict[str, Any]:
        arch = self.spec.arch
        args = (
            eval_index,
            arch.halt_max_steps,
            state.micro_batch_size,
            self.device,
            self.dtype,
            self.spec.train.eval_max_examples,
        )
        if state.ema is not None:
            with state.ema.swap_in(state.model):
                result = evaluate(state.model, *args)
        else:
            result = evaluate(state.model, *args)
        state.last_eval = result
        state.best_exact_accuracy = max(state.best_exact_accuracy, result["exact_accuracy"])
        return {"kind": "eval", "step": state.step, **result}

    def _checkpoint(self, state: TrainState, reason: str) -> bool:
        try:
            path = self.pm.hook.save_checkpoint(state=state, run_dir=self.run_dir, reason=reason)
        except OSError as exc:
            self.log(
                f"warning: checkpoint at step {state.step} failed ({exc}); "
                "the previous checkpoint is intact"
            )
            return False
        if path is None:
            return True  # no checkpoint plugin enabled: nothing to write
        return True

    def _set_micro_batch(self, state: TrainState, size: int, reason: str) -> None:
        global_batch = self.spec.train.global_batch_size
        size = max(1, min(size, global_batch))
        while global_batch % size:
            size -= 1
        if size != state.micro_batch_size:
            self.log(
                f"micro-batch {state.micro_batch_size} -> {size} "
                f"(accumulation {global_batch // size}): {reason}"
            )
            state.micro_batch_size = size

    def _flush_messages(self, control: TrainControl) -> None:
        for message in control.messages:
            self.log(message)
        control.messages.clear()


def load_state(state: TrainState, payload: dict[str, Any]) -> None:
    """Restore a TrainState from a checkpoint payload written by ``TrainState.state_dict``."""
    from trm.model import TRMCarry

    state.model.load_state_dict(payload["model"])
    for opt, opt_state in zip(state.optimizers, payload["optimizers"], strict=True):
        opt.load_state_dict(opt_state)
    if state.ema is not None and payload.get("ema") is not None:
        state.ema.load_state_dict(payload["ema"])
    device = next(state.model.parameters()).device
    if payload.get("carry") is not None:
        state.carry = TRMCarry.from_state_dict(payload["carry"]).to(device)
    state.step = int(payload["step"])
    state.samples = int(payload["samples"])
    state.micro_batch_size = int(payload.get("micro_batch_size") or state.micro_batch_size)
    state.best_exact_accuracy = float(payload.get("best_exact_accuracy", 0.0))
    state.last_eval = dict(payload.get("last_eval") or {})
    state.wall_s_before = float(payload.get("wall_s", 0.0))
    torch.set_rng_state(payload["rng_torch"])


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metrics rows after ``step`` so a resumed run continues without repeats."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                kept.append(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
