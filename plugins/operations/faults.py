"""faults: inject failures at chosen steps, to test that runs survive them (opt-in).

Switch it on with ``--plugins faults`` and say what to break in the environment variable
``TRM_FAULTS``: a comma-separated list of ``KIND@STEP[:N]`` (steps count from 1, the step
being taken), e.g. ``TRM_FAULTS="oom@3,oom@5:1,save-fail@4" trm run quickstart --plugins faults``.

==================  ===========================================================================
kind                effect at step STEP
==================  ===========================================================================
oom@S[:M]           ``torch.OutOfMemoryError`` (as CUDA raises it) entering the forward of
                    micro-batch M (default 0); only the first attempt of the step fails
oom-host@S[:M]      the CPU allocator's ``RuntimeError`` ("can't allocate memory")
oom-mps@S[:M]       the MPS backend's ``RuntimeError`` ("MPS backend out of memory"); only the mps
                    backend recognises it (on any other device it fails the run)
oom-update@S        out of memory inside the dense optimizer's update (not retryable)
oom-keep@S[:M]      from step S on, every training forward of micro-batches above M rows
                    (default 0: every size) fails with ``torch.OutOfMemoryError`` while the
                    model keeps its activations: a micro-batch that fits only with
                    activation checkpointing
device-error@S[:M]  the device fails entering the forward of micro-batch M: the
                    ``torch.AcceleratorError`` CUDA raises for an illegal memory access; from
                    then on every forward fails the same way (a lost device stays lost)
nan@S               every logit of the step becomes NaN (a non-finite loss)
save-fail@S         the checkpoint write after step S fails with "No space left on device"
kill-in-save@S      the checkpoint write after step S dies by SIGKILL half-way through its
                    temporary file, as a power cut or the OOM killer would
sigint@S, sigterm@S the process sends itself SIGINT / SIGTERM after step S (repeat the item
                    to send it twice)
leak@S[:MB]         from step S on, every step keeps MB more megabytes of host memory
                    (default 4), written so the pages are resident: a steady leak
slow@S[:MS]         from step S on, every step waits MS more milliseconds (default 100) in
                    its first forward; several items add up: ``slow@1:100,slow@30:300``
kill@S              the process kills itself with SIGKILL after step S (a crash, the OOM
                    killer), before the step's checkpoint
==================  ===========================================================================

Under torchrun the faults fire only on the ranks listed in ``TRM_FAULTS_RANKS`` (e.g. ``1``;
default every rank) and only in the job's first attempt (``TORCHELASTIC_RESTART_COUNT`` 0),
so a job that torchrun restarts is not broken again.

It acts through torch's own module and optimizer hooks and through ``save_checkpoint``
(``tryfirst``), never by changing the loop. A fault fires once per run; ``leak`` and
``slow`` last from their step to the end of the run (``trm report`` and the end of
``trm run`` should flag them).
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from attrs import define

from trm import hookimpl
from trm.control import TrainControl
from trm.device.distributed import env_world, launched_by_torchrun, restart_count
from trm.errors import TrmError
from trm.state import TrainState

ENV_VAR = "TRM_FAULTS"
RANKS_ENV_VAR = "TRM_FAULTS_RANKS"
KINDS = (
    "oom",
    "oom-host",
    "oom-mps",
    "oom-update",
    "oom-keep",
    "device-error",
    "nan",
    "save-fail",
    "kill-in-save",
    "sigint",
    "sigterm",
    "leak",
    "slow",
    "kill",
)
# The kinds that last from their step on; the number after ':' is an amount (for oom-keep, the
# largest micro-batch that still fits), not the micro-batch the fault fires in.
STEADY_DEFAULTS = {"leak": 4, "slow": 100, "oom-keep": 0}


def _resident_block(size_bytes: int) -> mmap.mmap:
    """``size_bytes`` of fresh anonymous memory, every page written so it is resident.

    A mapping of its own, never freed heap memory reused (the loop keeps freed blocks for
    reuse, so a heap allocation might not grow the resident size at all)."""
    block = mmap.mmap(-1, size_bytes)
    page = mmap.PAGESIZE
    for offset in range(0, size_bytes, page):
        block[offset] = 1
    return block


@define(frozen=True)
class Fault:
    kind: str
    step: int
    micro_batch: int = 0


def parse_faults(text: str) -> list[Fault]:
    """Parse ``TRM_FAULTS``; TrmError names a malformed item. For ``leak`` and ``slow`` the
    ``micro_batch`` field holds the amount (MB, ms), its default when not given."""
    faults = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        kind, _, where = item.partition("@")
        step_text, _, micro_text = where.partition(":")
        try:
            default = STEADY_DEFAULTS.get(kind, 0)
            fault = Fault(kind, int(step_text), int(micro_text) if micro_text else default)
        except ValueError:
            fault = None
        if fault is None or kind not in KINDS or fault.step < 1 or fault.micro_batch < 0:
            raise TrmError(
                f"{ENV_VAR}: cannot read {item!r}; expected KIND@STEP[:N] with KIND "
                f"one of {', '.join(KINDS)}"
            )
        faults.append(fault)
    return faults


def armed_here() -> bool:
    """Whether faults fire in this process: always alone; under torchrun on the ranks of
    ``TRM_FAULTS_RANKS`` (all when unset) and in the first attempt only."""
    if not launched_by_torchrun():
        return True
    if restart_count() > 0:
        return False
    ranks = os.environ.get(RANKS_ENV_VAR, "").strip()
    if not ranks:
        return True
    return str(env_world().rank) in {r.strip() for r in ranks.split(",")}


def _device_error(step: int) -> BaseException:
    """What CUDA raises when a kernel touched memory it must not (PyTorch >= 2.8)."""
    error_type = getattr(torch, "AcceleratorError", RuntimeError)
    return error_type(
        "CUDA error: an illegal memory access was encountered (injected by the faults "
        f"plugin at step {step})"
    )


def _oom_error(kind: str, step: int) -> BaseException:
    where = f"(injected by the faults plugin at step {step})"
    if kind == "oom-host":
        return RuntimeError(
            f"[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory: "
            f"you tried to allocate 1073741824 bytes {where}"
        )
    if kind == "oom-mps":
        return RuntimeError(f"MPS backend out of memory {where}")
    return torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate 1.00 GiB {where}")


class Faults:
    """faults: inject failures at chosen steps (``TRM_FAULTS``), to test that runs survive them.

    One instance per run: the faults still pending and the hooks it installed on the model.
    """

    ACTIVATION = "opt-in"

    def __init__(self) -> None:
        self.pending: Counter = Counter()
        self.state: TrainState | None = None
        self.forward_calls: Counter = Counter()
        self.handles: list[Any] = []
        self.steady: list[Fault] = []  # leak and slow: from their step to the end
        self.leaked: list[mmap.mmap] = []
        self.device_lost_at: int | None = None  # device-error: the step the device failed

    def take(self, kind: str, step: int, micro_batch: int = 0) -> bool:
        key = Fault(kind, step, micro_batch)
        if self.pending[key] > 0:
            self.pending[key] -= 1
            return True
        return False

    def step_in_progress(self) -> int:
        return 0 if self.state is None else self.state.step + 1

    def before_forward(self, module: torch.nn.Module, _args: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return
        step = self.step_in_progress()
        micro = self.forward_calls[step]
        self.forward_calls[step] += 1
        if micro == 0:
            wait_ms = sum(f.micro_batch for f in self.steady if f.kind == "slow" and f.step <= step)
            time.sleep(wait_ms / 1000)
        for kind in ("oom", "oom-host", "oom-mps"):
            if self.take(kind, step, micro):
                raise _oom_error(kind, step)
        rows = getattr(_args[0], "batch_size", 0) if _args else 0  # the carry's rows
        keeps = not getattr(module, "activation_checkpointing", False)
        for fault in self.steady:
            fits = rows <= fault.micro_batch or not keeps
            if fault.kind == "oom-keep" and fault.step <= step and not fits:
                raise _oom_error("oom", step)
        if self.device_lost_at is None and self.take("device-error", step, micro):
            self.device_lost_at = step
        if self.device_lost_at is not None:
            raise _device_error(self.device_lost_at)

    def after_forward(self, module: torch.nn.Module, _args: Any, output: Any) -> Any:
        if module.training and self.pending[Fault("nan", self.step_in_progress())] > 0:
            _carry, outputs = output
            outputs["logits"] = outputs["logits"] * float("nan")
        return output

    def before_update(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        step = self.step_in_progress()
        if self.take("oom-update", step):
            raise _oom_error("oom", step)

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        self.state = state
        faults = parse_faults(os.environ.get(ENV_VAR, ""))
        faults = faults if armed_here() else []
        self.steady = [f for f in faults if f.kind in STEADY_DEFAULTS]
        self.pending = Counter(f for f in faults if f.kind not in STEADY_DEFAULTS)
        model = state.model
        self.handles.append(model.register_forward_pre_hook(self.before_forward))
        self.handles.append(model.register_forward_hook(self.after_forward))
        for optimizer in state.optimizers:
            if isinstance(optimizer, torch.optim.Optimizer):
                self.handles.append(optimizer.register_step_pre_hook(self.before_update))
        if self.pending or self.steady:
            names = [f"{f.kind}@{f.step}" for f in sorted(self.pending, key=str)]
            names += [f"{f.kind}@{f.step}:{f.micro_batch}" for f in self.steady]
            control.log(f"faults: will inject {', '.join(names)}")

    @hookimpl
    def on_step(self, state: TrainState, control: TrainControl) -> None:
        for kind, sig in (("sigint", signal.SIGINT), ("sigterm", signal.SIGTERM)):
            while self.take(kind, state.step):
                os.kill(os.getpid(), sig)
        if self.take("kill", state.step):
            os.kill(os.getpid(), signal.SIGKILL)
        self.pending.pop(Fault("nan", state.step), None)
        for fault in self.steady:
            if fault.kind == "leak" and fault.step <= state.step:
                self.leaked.append(_resident_block(fault.micro_batch * 2**20))

    @hookimpl(tryfirst=True)
    def save_checkpoint(self, state: TrainState, run_dir: Path, reason: str) -> Path | None:
        if self.take("save-fail", state.step):
            raise OSError(errno.ENOSPC, f"No space left on device (injected at step {state.step})")
        if self.take("kill-in-save", state.step):
            folder = run_dir / "checkpoints"
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".step-{state.step:08d}.pt.injected.tmp"
            with partial.open("wb") as handle:
                handle.write(b"PK\x03\x04 half a checkpoint")
                handle.flush()
                os.fsync(handle.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        return None

    @hookimpl
    def on_train_end(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.leaked.clear()
        self.state = None
