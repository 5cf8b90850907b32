"""Checkpoints at ARC scale under torchrun, counted with fakes.

- rank 0 writes in the background: ``save`` returns once the checkpoint is on the host, while
  the write (serialize, fsync, hash) goes on; the next checkpoint waits for it first, and what
  is written is the state of the checkpoint's step, not a later one;
- the carry goes to the host in one copy per tensor, never cloned on its device first, and
  so does every other tensor of a background checkpoint;
- a checkpoint file loads memory-mapped, so the ranks of a node share the page cache and each
  copies only what it keeps.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trm.device.contract import DeviceBackend
from trm.errors import TrainingFailed
from trm.loop.checkpoints import Checkpointer, CheckpointSchedule
from trm.metrics_log import Journal, MetricsLog
from trm.model.trm import TRMCarry
from trm.plugins.operations import checkpoint as checkpoint_plugin
from trm.spec import RunSpec, TrainSpec
from trm.state import TrainState


class BlockingSaver:
    """A ``save_checkpoint`` hook that waits for ``release`` and records what it wrote."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.written: list[tuple[int, torch.Tensor, str]] = []
        self.payloads: list[dict] = []

    def save_checkpoint(self, state: TrainState, run_dir: Path, reason: str) -> Path:
        self.started.set()
        assert self.release.wait(timeout=30), "the test never released the write"
        payload = state.state_dict()
        self.payloads.append(payload)
        self.written.append(
            (state.step, payload["model"]["weight"], threading.current_thread().name)
        )
        return run_dir / f"step-{state.step:08d}.pt"


def tiny_state(tmp_path: Path) -> TrainState:
    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    return TrainState(
        spec=RunSpec(train=TrainSpec(global_batch_size=2)),
        model=model,
        optimizers=[],
        ema=None,
        carry=None,
        run_dir=tmp_path,
        total_steps=10,
    )


def checkpointer(tmp_path: Path, saver: BlockingSaver, lines: list[str]) -> Checkpointer:
    pm = SimpleNamespace(hook=SimpleNamespace(save_checkpoint=saver.save_checkpoint))
    journal = Journal(MetricsLog(tmp_path / "metrics.jsonl"), lines.append)
    return Checkpointer(pm, tmp_path, CheckpointSchedule(1), journal, background=True)


def test_save_returns_while_the_write_goes_on_and_writes_the_checkpoints_step(tmp_path):
    saver, lines = BlockingSaver(), []
    saving = checkpointer(tmp_path, saver, lines)
    state = tiny_state(tmp_path)
    state.step = 1
    saving.journal.metrics.__enter__()
    saving.save(state, "interval")  # returns although the hook has not finished
    assert saver.started.wait(timeout=30)
    assert saving.pending is not None and saving.pending.thread.is_alive()
    assert state.checkpoint_step is None  # not on disk yet, so not counted as written
    with torch.no_grad():  # training goes on meanwhile
        state.model.weight.fill_(7.0)
    state.step = 2
    saver.release.set()
    saving.save(state, "interval")  # waits for step 1's write, records it, starts step 2's
    assert state.checkpoint_step == 1
    saving.journal.metrics.__exit__()  # the loop has ended: flush opens metrics.jsonl itself
    saving.flush(state)
    assert state.checkpoint_step == 2
    events = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [e.count('"checkpoint"') for e in events] == [1, 1]
    (step_1, weight_1, thread_1), (step_2, weight_2, _) = saver.written
    assert (step_1, step_2) == (1, 2)
    assert torch.equal(weight_1, torch.ones(1, 3))  # the snapshot of step 1, not the live 7s
    assert torch.equal(weight_2, torch.full((1, 3), 7.0))
    assert thread_1 == "trm-checkpoint"  # serialized, fsynced and hashed off the loop's thread


def test_an_end_checkpoint_is_on_disk_before_save_returns(tmp_path):
    saver, lines = BlockingSaver(), []
    saver.release.set()
    saving = checkpointer(tmp_path, saver, lines)
    state = tiny_state(tmp_path)
    state.step = 3
    with saving.journal.metrics:
        saving.save(state, "end")
    assert saving.pending is None and state.checkpoint_step == 3


def test_a_failed_background_write_is_counted_when_settled(tmp_path):
    def failing(state: TrainState, run_dir: Path, reason: str) -> Path:
        raise OSError(28, "No space left on device")

    lines: list[str] = []
    pm = SimpleNamespace(hook=SimpleNamespace(save_checkpoint=failing))
    journal = Journal(MetricsLog(None), lines.append)
    saving = Checkpointer(pm, tmp_path, CheckpointSchedule(1), journal, background=True)
    state = tiny_state(tmp_path)
    state.step = 1
    with journal.metrics:
        saving.save(state, "interval")
        saving.flush(state)
    assert saving.failures == 1 and state.checkpoint_step is None
    assert any("checkpoint at step 1 failed" in line for line in lines)


@pytest.mark.parametrize("background", [True, False])
def test_a_write_failing_with_any_error_counts_as_a_failure_and_is_said(tmp_path, background):
    def failing(state: TrainState, run_dir: Path, reason: str) -> Path:
        raise RuntimeError("cannot pickle '_thread.lock' object")

    lines: list[str] = []
    pm = SimpleNamespace(hook=SimpleNamespace(save_checkpoint=failing))
    journal = Journal(MetricsLog(None), lines.append)
    saving = Checkpointer(pm, tmp_path, CheckpointSchedule(1), journal, background=background)
    state = tiny_state(tmp_path)
    with journal.metrics:
        for step in (1, 2):
            state.step = step
            saving.save(state, "interval")
        saving.settle(state)
        assert saving.failures == 2 and state.checkpoint_step is None
        state.step = 3
        with pytest.raises(TrainingFailed, match="3 checkpoint saves in a row failed"):
            saving.save(state, "interval")
            saving.settle(state)
    said = [line for line in lines if "checkpoint at step 1 failed" in line]
    assert said and "RuntimeError: cannot pickle" in said[0]
    assert not any("no plugin saves" in line for line in lines)


class CopyLog(TorchDispatchMode):
    """Every aten op that makes a tensor, with the device of its result."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.ops.append((func.overloadpacket.__name__, out.device.type))
        return out


def test_the_carry_goes_to_the_host_in_one_copy_never_cloned_on_its_device():
    rows = 4
    carry = TRMCarry(
        z_H=torch.randn(rows, 5, 8),
        z_L=torch.randn(rows, 5, 8),
        steps=torch.zeros(rows, dtype=torch.int32),
        halted=torch.ones(rows, dtype=torch.bool),
        current_data={"inputs": torch.zeros(rows, 4, dtype=torch.long)},
    )
    with CopyLog() as log:
        saved = carry.state_dict()
    copies = [(name, device) for name, device in log.ops if name != "detach"]  # detach: a view
    assert copies == [("_to_copy", "cpu")] * len(saved)  # no clone anywhere
    assert saved["z_H"].data_ptr() != carry.z_H.data_ptr()  # a copy: later steps cannot change it


class DeviceLikeBackend(DeviceBackend):
    """Copies every tensor to the host in ``to_host``, as a device with memory of its own
    does (the host's backend hands a host tensor back as it is)."""

    name = "device-like"

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().to("cpu", copy=True)


COPY_OPS = ("_to_copy", "clone", "copy_")


def _tensors(value) -> int:
    if isinstance(value, torch.Tensor):
        return 1
    if isinstance(value, dict):
        return sum(_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensors(v) for v in value)
    return 0


@pytest.mark.parametrize("backend", [None, DeviceLikeBackend()], ids=["host", "device"])
def test_a_background_checkpoint_copies_each_tensor_to_the_host_once(tmp_path, backend):
    saver, lines = BlockingSaver(), []
    saving = checkpointer(tmp_path, saver, lines)
    state = tiny_state(tmp_path)
    state.optimizers = [torch.optim.Adam(state.model.parameters())]
    state.model.weight.sum().backward()
    state.optimizers[0].step()  # the optimizer now holds state tensors too
    if backend is not None:
        state.backend = backend
    state.step = 1
    saved_weight = state.model.weight.detach().clone()
    with saving.journal.metrics:
        with CopyLog() as log:
            saving.save(state, "interval")
        with torch.no_grad():  # training goes on while the write waits
            state.model.weight.fill_(5.0)
        saver.release.set()
        saving.flush(state)
    copies = [name for name, device in log.ops if name in COPY_OPS and device == "cpu"]
    assert state.checkpoint_step == 1
    assert len(copies) == _tensors(saver.payloads[0]) > 3  # weight, Adam's step and moments, RNG
    assert torch.equal(saver.written[0][1], saved_weight)  # a copy, not the live weights


def test_a_checkpoint_file_loads_memory_mapped(tmp_path, monkeypatch):
    path = tmp_path / "step-00000001.pt"
    torch.save({"model": {"w": torch.zeros(256, 1024)}, "spec": {}}, path)
    seen: dict[str, object] = {}
    real_load = torch.load

    def recording_load(*args, **kwargs):
        seen.update(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(checkpoint_plugin.torch, "load", recording_load)
    payload = checkpoint_plugin.read_checkpoint(path)
    assert seen.get("mmap") is True
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps to see the mapping in")
    assert str(path) in maps.read_text()  # the tensors are pages of the file
    del payload
