"""The cpu backend's thread count follows the cores other processes leave free: at the start
(fewer threads when another process is busy) and during the run (a ``threads`` event row and
a line when contention appears or goes), never overriding an explicit ``runtime.threads``.
Every reading here is injected: no test depends on this machine's load or clock."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import attrs
import pytest
import torch

import trm
from tests.tiny_run import build_tiny_data, events, summary, write_spec
from trm.cli.main import main
from trm.hardware import HardwareProfile
from trm.plugins.backends import cpu
from trm.plugins.backends.cpu_contention import (
    CpuTimes,
    ThreadWatch,
    fit_threads,
    measure_start,
    others_busy_cpus,
)
from trm.spec import RunSpec, RuntimeSpec


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


class FakeMachine:
    """Readings of ``cpus`` CPUs, each call one ``step_s`` later, in which other processes
    hold ``others`` CPUs and this process used ``own`` CPUs."""

    def __init__(self, cpus: int = 2, others: float = 0.0, own: float = 1.0, step_s: float = 3.0):
        self.cpus, self.others, self.own, self.step_s = cpus, others, own, step_s
        self.now = CpuTimes(cpus, 0.0, 0.0, 0.0, 100.0)

    def read(self) -> CpuTimes:
        n = self.now
        self.now = CpuTimes(
            self.cpus,
            n.busy_s + (self.others + self.own) * self.step_s,
            n.total_s + self.cpus * self.step_s,
            n.own_s + self.own * self.step_s,
            n.wall_s + self.step_s,
        )
        return self.now

    def clock(self) -> float:
        return self.now.wall_s + self.step_s


def test_others_are_the_cpus_busy_less_this_process():
    machine = FakeMachine(cpus=4, others=1.5, own=2.0)
    assert others_busy_cpus(machine.read(), machine.read()) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("usable", "cpus", "others", "threads"),
    [
        (2, 2, 0.0, 2),
        (2, 2, 1.0, 1),
        (2, 2, 0.67, 1),
        (2, 2, 0.3, 2),
        (2, 2, 2.0, 1),
        (4, 8, 1.0, 4),
    ],
)
def test_threads_are_the_usable_cores_less_the_busy_cpus(usable, cpus, others, threads):
    assert fit_threads(usable, cpus, others) == threads


def test_a_busy_process_at_the_start_leaves_one_thread_on_two_cores_and_says_why():
    machine = FakeMachine(others=1.0)
    start = measure_start(machine.read, sleep=lambda _s: None)
    threads, notes = cpu.choose_threads(0, 2, start)
    assert threads == 1
    assert len(notes) == 1 and "other processes held 1.0 of the 2 CPUs" in notes[0]
    assert cpu.choose_threads(0, 2, measure_start(FakeMachine().read, lambda _s: None)) == (2, [])


def _spec(threads: int) -> RunSpec:
    return attrs.evolve(RunSpec(), runtime=RuntimeSpec(device="cpu", threads=threads))


def test_the_backend_counts_busy_cores_at_the_start_but_keeps_an_explicit_count(monkeypatch):
    monkeypatch.setattr(cpu, "allowed_cpu_count", lambda: 2)
    busy = FakeMachine(others=1.0)
    monkeypatch.setattr(
        cpu, "measure_start", functools.partial(measure_start, busy.read, sleep=lambda _s: None)
    )
    hardware = HardwareProfile(physical_cores=2, logical_cores=2)
    backend = cpu.CpuBackend()
    chosen = backend.configure_runtime(_spec(0), hardware)
    assert chosen.threads == 1 and torch.get_num_threads() == 1 and backend.watch is not None
    explicit = cpu.CpuBackend()
    assert explicit.configure_runtime(_spec(2), hardware).threads == 2
    assert torch.get_num_threads() == 2 and explicit.watch is None


def _watch(machine: FakeMachine, threads: int) -> ThreadWatch:
    return ThreadWatch(2, threads, machine.read(), read=machine.read, clock=machine.clock)


def test_the_watch_drops_a_thread_when_a_busy_process_appears_and_gives_it_back_after():
    machine = FakeMachine(others=0.0)
    watch = _watch(machine, 2)
    assert watch.after_step() is None
    machine.others = 0.67  # a busy process beside two trm threads on two CPUs gets ~2/3
    assert watch.after_step() is None  # one reading is not enough
    threads, why = watch.after_step()
    assert threads == 1 and "other processes held 0.7 of the 2 CPUs" in why
    machine.others = 1.0
    assert watch.after_step() is None
    machine.others = 0.0
    assert watch.after_step() is None
    threads, why = watch.after_step()
    assert threads == 2 and "1 more free" in why


def test_the_watch_does_not_follow_a_single_spike():
    machine = FakeMachine(others=0.0)
    watch = _watch(machine, 2)
    machine.others = 1.0
    assert watch.after_step() is None
    machine.others = 0.0
    assert [watch.after_step() for _ in range(4)] == [None] * 4


def test_the_watch_reads_nothing_before_its_interval():
    machine = FakeMachine(others=1.0)
    calls = []
    watch = ThreadWatch(2, 2, machine.read(), read=lambda: calls.append(1), clock=lambda: 100.0)
    assert [watch.after_step() for _ in range(3)] == [None] * 3 and calls == []


def _busy_after_start(monkeypatch) -> None:
    """Each run's start reads an idle machine of two cores; from then on one CPU is busy."""
    monkeypatch.setattr(cpu, "_usable_cores", lambda _hardware: 2)
    machine = FakeMachine(others=0.0)

    def start() -> tuple[CpuTimes, float] | None:
        machine.others = 0.0
        reading = measure_start(machine.read, sleep=lambda _s: None)
        machine.others = 1.0
        return reading

    monkeypatch.setattr(cpu, "measure_start", start)
    watch = functools.partial(ThreadWatch, read=machine.read, clock=machine.clock)
    monkeypatch.setattr(cpu, "ThreadWatch", watch)


@pytest.mark.slow
def test_a_run_records_and_says_the_thread_change(tmp_path: Path, monkeypatch, capsys):
    _busy_after_start(monkeypatch)
    data_dir = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data_dir)
    spec.write_text(spec.read_text().replace("threads = 1", "threads = 0"))
    assert main(["run", str(spec), "--out", str(tmp_path / "run"), "--max-steps", "4"]) == 0
    (row,) = events(tmp_path / "run", "threads")
    assert (row["step"], row["old"], row["new"]) == (2, 2, 1)
    assert "other processes held 1.0 of the 2 CPUs" in row["reason"]
    assert "step 2: threads 2 -> 1: other processes held" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_with_explicit_threads_never_changes_them(tmp_path: Path, monkeypatch):
    _busy_after_start(monkeypatch)
    data_dir = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data_dir)
    # every CPU this process may use (pytest-xdist gives a worker its own), at least 2 if it can
    explicit = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    spec.write_text(spec.read_text().replace("threads = 1", f"threads = {explicit}"))
    seen: list[int] = []
    assert main(["run", str(spec), "--out", str(tmp_path / "run"), "--max-steps", "4"]) == 0
    assert events(tmp_path / "run", "threads") == []
    probe = ThreadsSeen(seen)
    trm.train(spec, out=tmp_path / "run2", max_steps=2, plugins=[probe])
    assert seen == [explicit, explicit]


class ThreadsSeen:
    """Records torch's thread count at every step of a run."""

    def __init__(self, seen: list[int], fail_at_step: int | None = None) -> None:
        self.seen, self.fail_at_step = seen, fail_at_step

    @trm.hookimpl
    def on_step(self, state) -> None:
        self.seen.append(torch.get_num_threads())
        if state.step == self.fail_at_step:
            raise RuntimeError("a plugin failed")


@pytest.mark.slow
def test_train_gives_back_the_callers_thread_count_however_it_ends(tmp_path: Path):
    """The run trains on its own count (1 here) and the caller's (3) is back afterwards: after
    a finished run, after a run the watch changed, and after a run a plugin's error ended."""
    data_dir = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data_dir)  # runtime.threads = 1
    torch.set_num_threads(3)
    seen: list[int] = []
    trm.train(spec, out=tmp_path / "done", max_steps=2, plugins=[ThreadsSeen(seen)])
    assert seen == [1, 1] and torch.get_num_threads() == 3
    seen.clear()
    with pytest.raises(Exception, match="a plugin failed"):
        trm.train(spec, out=tmp_path / "failed", max_steps=3, plugins=[ThreadsSeen(seen, 2)])
    assert seen == [1, 1] and torch.get_num_threads() == 3


@pytest.mark.slow
def test_a_run_the_watch_changed_leaves_the_callers_thread_count(tmp_path: Path, monkeypatch):
    _busy_after_start(monkeypatch)
    data_dir = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data_dir)
    spec.write_text(spec.read_text().replace("threads = 1", "threads = 0"))
    torch.set_num_threads(3)
    seen: list[int] = []
    trm.train(spec, out=tmp_path / "run", max_steps=4, plugins=[ThreadsSeen(seen)])
    assert seen[0] == 2 and seen[-1] == 1
    assert torch.get_num_threads() == 3


def test_estimate_gives_back_the_callers_thread_count(tmp_path: Path):
    torch.set_num_threads(3)
    trm.estimate("quickstart", overrides={"runtime.threads": 1}, out=tmp_path / "run")
    assert torch.get_num_threads() == 3


@pytest.mark.slow
def test_a_resumed_run_goes_on_with_its_checkpoints_threads_and_ends_bit_identical(
    tmp_path: Path, monkeypatch
):
    """The default policy (threads 0) on a machine that gets busy after each start: the watch
    drops to one thread at step 2. A run stopped at step 6 and resumed starts again on two
    threads (the machine is idle at its start) unless it goes on with its checkpoint's one;
    the sums of the two counts round differently, so only then are the weights those of the
    uninterrupted run."""
    _busy_after_start(monkeypatch)
    data_dir = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data_dir)
    spec.write_text(spec.read_text().replace("threads = 1", "threads = 0"))
    whole: list[int] = []
    trm.train(spec, out=tmp_path / "whole", plugins=[ThreadsSeen(whole)])
    first: list[int] = []
    trm.train(spec, out=tmp_path / "cut", max_steps=6, plugins=[ThreadsSeen(first)])
    rest: list[int] = []
    trm.train(spec, out=tmp_path / "cut", plugins=[ThreadsSeen(rest)])
    assert first + rest == whole and whole[:2] == [2, 2] and set(whole[2:]) == {1}
    (row,) = events(tmp_path / "cut", "threads")[1:]
    assert (row["step"], row["new"]) == (6, 1) and "checkpoint step 6" in row["reason"]
    hashes = [summary(tmp_path / run)["final_weights_sha256"] for run in ("whole", "cut")]
    assert hashes[0] == hashes[1]
