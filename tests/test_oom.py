"""Out-of-memory recovery: the step is retried with activation checkpointing switched on or with
half the micro-batch, learning unchanged.

The halving tests set ``runtime.activation_checkpointing = "off"`` (HALVING), so that
memory-guard's first answer, recomputation, is not available to them. Faults are injected by
the ``faults`` plugin through ``trm run`` (in process) on the tiny spec; memory-guard's growth
and pressure responses are driven with a replayed pressure reader.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.conftest import error_lines
from tests.tiny_run import (
    GLOBAL_BATCH,
    TOTAL_STEPS,
    build_tiny_data,
    events,
    load_weights,
    metrics,
    summary,
    write_spec,
)
from trm.cli.main import main
from trm.control import TrainControl
from trm.device.contract import HOST
from trm.device.oom import is_out_of_memory, memory_kind
from trm.plugins.backends.cuda import CUDA
from trm.plugins.backends.mps import MPS
from trm.plugins.operations import memory_guard
from trm.spec import load_spec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Dataset, a spec with the whole batch in one micro-batch, and its uninterrupted run."""
    base = tmp_path_factory.mktemp("oom")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, micro=GLOBAL_BATCH)
    reference = base / "reference"
    assert main(["run", str(spec), "--out", str(reference)]) == 0
    return SimpleNamespace(base=base, data=data, spec=spec, reference=reference)


@pytest.fixture(autouse=True)
def quiet_memory(monkeypatch):
    """Low, steady pressure, so only injected faults change the micro-batch."""
    monkeypatch.setattr(
        memory_guard, "read_pressure", lambda *_: memory_guard.MemoryPressure(host=0.3)
    )


HALVING = ("--set", "runtime.activation_checkpointing=off")


def _final(run_dir):
    return load_weights(run_dir / "checkpoints" / f"step-{TOTAL_STEPS:08d}.pt")


def test_oom_at_three_steps_gives_the_same_weights_and_samples_as_an_uninterrupted_run(
    tiny, tmp_path, cli, monkeypatch
):
    run_dir = tmp_path / "run"
    # device OOM at step 3, host OOM in the second micro-batch of step 6, device OOM at step 9
    monkeypatch.setenv("TRM_FAULTS", "oom@3,oom-host@6:1,oom@9")
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults", *HALVING)
    assert result.code == 0, result.err

    oom = events(run_dir, "out_of_memory")
    assert [(e["step"], e["micro_batch_size"]) for e in oom] == [(3, 8), (6, 4), (9, 2)]
    changes = events(run_dir, "micro_batch")
    assert [(e["step"], e["old"], e["new"]) for e in changes] == [(3, 8, 4), (6, 4, 2), (9, 2, 1)]
    assert "out of device memory" in changes[0]["reason"] and "host" in changes[1]["reason"]
    assert "accumulation 1 -> 2" in changes[0]["reason"]
    assert "step 3: out of memory at micro-batch 8" in result.err

    rows = [r for r in metrics(run_dir) if "kind" not in r]
    reference_rows = [r for r in metrics(tiny.reference) if "kind" not in r]
    assert [r["step"] for r in rows] == list(range(1, TOTAL_STEPS + 1))
    assert [r["samples"] for r in rows] == [r["samples"] for r in reference_rows]
    assert summary(run_dir)["samples"] == TOTAL_STEPS * GLOBAL_BATCH
    assert [r["micro_batch_size"] for r in rows] == [8, 8, 4, 4, 4, 2, 2, 2, 1, 1, 1, 1]
    for before, after in zip(reference_rows, rows, strict=True):
        assert after["loss"] == pytest.approx(before["loss"], rel=1e-4)

    expected, got = _final(tiny.reference), _final(run_dir)
    for name, tensor in expected.items():
        scale = float(tensor.abs().max()) if tensor.is_floating_point() else 1.0
        error = float((got[name].double() - tensor.double()).abs().max())
        assert error <= 1e-4 * scale + 1e-6, f"{name}: off by {error:.3g} at scale {scale:.3g}"


def test_oom_without_memory_guard_fails_with_a_clear_message(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_FAULTS", "oom@2")
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "faults,no:memory-guard")
    assert result.code == 1
    (line,) = error_lines(result.err)
    assert "step 2: out of memory with micro-batch 8" in line
    assert "is memory-guard off?" in line and "checkpoint of step 1 is intact" in line


def test_oom_at_micro_batch_one_fails_saying_so(tiny, tmp_path, cli, monkeypatch):
    spec = write_spec(tmp_path, tiny.data, micro=1)
    monkeypatch.setenv("TRM_FAULTS", "oom@2")
    result = cli("run", spec, "--out", tmp_path / "run", "--plugins", "faults", *HALVING)
    assert result.code == 1
    assert "the micro-batch is already 1" in error_lines(result.err)[0]


def test_oom_while_updating_weights_stops_instead_of_retrying(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_FAULTS", "oom-update@3")
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "faults")
    assert result.code == 1
    (line,) = error_lines(result.err)
    assert "step 3: out of memory while updating the weights" in line


def test_micro_batch_grows_back_when_pressure_stays_low(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setattr(memory_guard, "GROW_AFTER_STEPS", 3)
    monkeypatch.setenv("TRM_FAULTS", "oom@2")
    run_dir = tmp_path / "run"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults", *HALVING)
    assert result.code == 0, result.err
    changes = [(e["step"], e["old"], e["new"]) for e in events(run_dir, "micro_batch")]
    assert changes == [(2, 8, 4), (5, 4, 8)]
    assert "memory-guard grows it back" in events(run_dir, "micro_batch")[1]["reason"]


def test_oom_at_a_micro_batch_that_fits_only_with_recomputation_switches_it_on(
    tiny, tmp_path, cli, monkeypatch
):
    """From step 3 on, a micro-batch above 4 rows runs out of memory unless activations are
    recomputed: memory-guard switches recomputation on, the run keeps its micro-batch of 8
    (the whole global batch) and ends with the weights, bit for bit, of a run that had it on
    from the start (and of the reference, which never had it: float32 on the CPU)."""
    run_dir, from_start = tmp_path / "switched", tmp_path / "from-start"
    monkeypatch.setenv("TRM_FAULTS", "oom-keep@3:4")
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults")
    assert result.code == 0, result.err
    monkeypatch.delenv("TRM_FAULTS")
    on = ("--set", "runtime.activation_checkpointing=on")
    assert cli("run", tiny.spec, "--out", from_start, *on).code == 0

    assert [(e["step"], e["micro_batch_size"]) for e in events(run_dir, "out_of_memory")] == [
        (3, 8)
    ]
    (switch,) = events(run_dir, "activation_checkpointing")
    assert switch["step"] == 3 and switch["on"] is True
    assert "memory-guard recomputes activations" in switch["reason"]
    assert events(run_dir, "micro_batch") == []
    lines = [ln for ln in result.err.splitlines() if "activation checkpointing on" in ln]
    assert (
        len(lines) == 1 and "step 3: activation checkpointing on: out of device memory" in lines[0]
    )
    rows = [r for r in metrics(run_dir) if "kind" not in r]
    assert [r["micro_batch_size"] for r in rows] == [GLOBAL_BATCH] * TOTAL_STEPS
    assert summary(run_dir)["samples"] == TOTAL_STEPS * GLOBAL_BATCH

    switched, expected, never = _final(run_dir), _final(from_start), _final(tiny.reference)
    for name, tensor in expected.items():
        assert torch.equal(switched[name], tensor), name
        assert torch.equal(never[name], tensor), name

    report = cli("report", run_dir, "--out", tmp_path / "report")
    assert report.code == 0, report.err
    assert "activation checkpointing on from step 3" in report.err


def test_an_explicit_off_is_kept_and_the_micro_batch_halves_instead(
    tiny, tmp_path, cli, monkeypatch
):
    monkeypatch.setenv("TRM_FAULTS", "oom-keep@2:4")
    run_dir = tmp_path / "run"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults", *HALVING)
    assert result.code == 0, result.err
    assert events(run_dir, "activation_checkpointing") == []
    first = events(run_dir, "micro_batch")[0]
    assert (first["step"], first["old"], first["new"]) == (2, 8, 4)


class _Loop:
    """Just enough of a run for memory-guard's hooks: a state and the loop's micro-batch rule."""

    def __init__(self, spec_path, micro: int) -> None:
        spec = load_spec(spec_path)
        self.state = SimpleNamespace(
            spec=spec, micro_batch_size=micro, step=0, device=torch.device("cpu"), backend=HOST
        )
        self.pressure = memory_guard.MemoryPressure(host=0.3)
        self.guard = memory_guard.MemoryGuard(reader=lambda device: self.pressure)
        self.guard.on_train_start(self.state, TrainControl())

    def step(self, pressure: memory_guard.MemoryPressure) -> TrainControl:
        self.state.step += 1
        control = TrainControl()
        self.pressure = pressure
        self.guard.on_step(self.state, {}, control)
        self._apply(control)
        return control

    def oom(self) -> None:
        """A step that ran out of memory, was retried with the smaller size and finished."""
        control = TrainControl()
        self.guard.on_out_of_memory(self.state, torch.OutOfMemoryError("CUDA oom"), control)
        self._apply(control)
        self.step(memory_guard.MemoryPressure(0.2))  # its own end: not counted as a low step

    def _apply(self, control: TrainControl) -> None:
        if control.micro_batch_request:
            self.state.micro_batch_size = control.micro_batch_request[0]


def test_growth_is_cautious_a_size_that_failed_again_waits_twice_as_long(tiny, monkeypatch):
    monkeypatch.setattr(memory_guard, "GROW_AFTER_STEPS", 4)
    low, medium = memory_guard.MemoryPressure(0.2), memory_guard.MemoryPressure(0.8)
    loop = _Loop(tiny.spec, micro=8)
    loop.oom()
    assert loop.state.micro_batch_size == 4
    for _ in range(3):
        loop.step(low)
    loop.step(medium)  # not low: the streak restarts
    for _ in range(3):
        loop.step(low)
    assert loop.state.micro_batch_size == 4
    loop.step(low)
    assert loop.state.micro_batch_size == 8
    loop.oom()  # 8 failed a second time: now 8 low steps are needed
    for _ in range(7):
        loop.step(low)
    assert loop.state.micro_batch_size == 4
    loop.step(low)
    assert loop.state.micro_batch_size == 8


def test_growth_waits_while_another_plugin_holds_the_micro_batch_smaller(tiny, monkeypatch):
    monkeypatch.setattr(memory_guard, "GROW_AFTER_STEPS", 2)
    low = memory_guard.MemoryPressure(0.2)
    loop = _Loop(tiny.spec, micro=8)
    loop.oom()
    loop.state.micro_batch_size = 2  # e.g. the thermal plugin halved it while hot
    for _ in range(5):
        assert loop.step(low).micro_batch_request is None
    loop.state.micro_batch_size = 4  # restored by that plugin
    loop.step(low)
    loop.step(low)
    assert loop.state.micro_batch_size == 8


def test_critical_host_pressure_shrinks_ahead_of_the_oom_killer_and_checkpoints(tiny):
    loop = _Loop(tiny.spec, micro=8)
    control = loop.step(memory_guard.MemoryPressure(host=0.97))
    assert loop.state.micro_batch_size == 4
    assert control.checkpoint_reasons == ["memory pressure"]
    assert any("memory pressure is high" in m for m in control.messages)
    again = loop.step(memory_guard.MemoryPressure(host=0.97))  # within the cooldown
    assert again.micro_batch_request is None and loop.state.micro_batch_size == 4


def test_out_of_memory_errors_of_every_backend_are_recognised():
    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    mps = RuntimeError("MPS backend out of memory (MPS allocated: 1.2 GB)")
    host = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB")
    windows = RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB")
    for error in (cuda, host, windows, MemoryError()):
        assert is_out_of_memory(error), error
    assert not is_out_of_memory(mps) and is_out_of_memory(mps, MPS)  # the backend knows its own
    kinds = [memory_kind(cuda, CUDA), memory_kind(mps, MPS), memory_kind(host, CUDA)]
    assert [*kinds, memory_kind(MemoryError())] == [
        "CUDA device",
        "MPS device",
        "host",
        "host",
    ]
    for error in (RuntimeError("shape mismatch"), ValueError("out of memory"), KeyError("x")):
        assert not is_out_of_memory(error), error
