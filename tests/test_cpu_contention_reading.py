"""The contention reading counts trm's own processes as trm's: a child process that burns CPU
(a data worker, a trial worker) is not "other load", while it runs and after it is waited for.
The readings are psutil's on every platform; nothing here asserts a time."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import psutil

from trm.plugins.backends.cpu_contention import (
    CpuTimes,
    others_busy_cpus,
    own_cpu_s,
    read_cpu_times,
)

# CPU seconds the child burns before it says so (then it waits, alive, for its stdin to close)
BURN_S = 0.4
CHILD = f"""
import sys, time
while time.process_time() < {BURN_S}:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


def test_a_running_child_and_a_waited_for_child_are_trms_own_cpu_time():
    before = read_cpu_times()
    assert before is not None and before.cpus >= 1
    mine_before = time.process_time()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "burnt"
        running = read_cpu_times()
        child_times = psutil.Process(child.pid).cpu_times()
        child_s = child_times.user + child_times.system
        mine_s = time.process_time() - mine_before
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert child_s >= BURN_S - 0.05
    # while it runs, its CPU time is in trm's: beyond what this process used itself
    assert running.own_s - before.own_s >= mine_s + child_s - 0.05
    waited = read_cpu_times()
    # once waited for, it stays counted (psutil's children_user/children_system)
    assert waited.own_s >= running.own_s - 0.05
    assert running.total_s > before.total_s and running.busy_s >= before.busy_s


def _times(user: float, system: float, children: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(user=user, system=system, children_user=children, children_system=0.0)


class _Process:
    """What read_cpu_times asks of psutil.Process, with its own numbers."""

    def __init__(self, own: float, children: list, affinity: list[int] | None) -> None:
        self.own, self.kids, self.affinity = own, children, affinity

    def cpu_times(self) -> SimpleNamespace:
        return _times(self.own, 0.0)

    def children(self, recursive: bool = False) -> list:
        assert recursive
        return self.kids

    def cpu_affinity(self) -> list[int]:
        if self.affinity is None:
            raise AttributeError("no affinity on this platform")
        return self.affinity


class _Gone:
    """A child that ended between the listing and the reading."""

    pid = 99

    def cpu_times(self) -> SimpleNamespace:
        raise psutil.NoSuchProcess(self.pid)


def _cpu(user: float, idle: float, iowait: float = 0.0, guest: float = 0.0):
    from collections import namedtuple

    fields = namedtuple("scputimes", "user nice system idle iowait guest guest_nice")
    return fields(user, 0.0, 0.0, idle, iowait, guest, 0.0)


def test_the_reading_adds_the_childrens_time_and_counts_only_the_cpus_this_process_may_use():
    busy_child = _Process(3.0, [], None)
    process = _Process(1.0, [busy_child, _Gone()], [1])
    cpus = [_cpu(100.0, 0.0), _cpu(10.0, 5.0, iowait=1.0, guest=2.0)]
    reading = read_cpu_times(process, lambda: cpus)
    assert reading.cpus == 1  # CPU 0 is not this process's
    assert reading.own_s == 4.0  # itself and its running child; the one gone is left out
    assert (reading.busy_s, reading.total_s) == (10.0, 16.0)  # guest is inside user
    everywhere = read_cpu_times(_Process(1.0, [], None), lambda: cpus)  # no affinity (macOS)
    assert everywhere.cpus == 2
    assert own_cpu_s(_Process(1.0, [], None)) == 1.0


def test_a_busy_child_is_not_counted_as_other_load():
    # two CPUs busy for a 1 s window: this process 1 s, its child 1 s: nobody else
    before = CpuTimes(2, 0.0, 0.0, 0.0, 0.0)
    after = CpuTimes(2, 2.0, 2.0, 2.0, 1.0)
    assert others_busy_cpus(before, after) == 0.0


def test_a_sweep_worker_counts_its_sibling_workers_as_trm_s_own_load():
    """A sweep's parent names itself in TRM_OWN_PROCESS_ROOT for its workers: a worker's
    reading then counts a busy sibling worker's CPU time as trm's own; a value naming no
    ancestor, or no value, leaves the worker's own tree alone."""
    import os

    from trm.hardware import OWN_PROCESS_ROOT_ENV
    from trm.plugins.backends.cpu_contention import own_root

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        worker = psutil.Process(idle.pid)
        root = own_root(worker, {OWN_PROCESS_ROOT_ENV: str(os.getpid())})
        assert root.pid == os.getpid()
        sibling_s = sum(psutil.Process(busy.pid).cpu_times()[:2])
        assert sibling_s > 0.1
        assert own_cpu_s(root) >= sibling_s  # the busy sibling is trm's own
        assert own_cpu_s(worker) < sibling_s  # without the root, only the idle worker
        assert own_root(worker, {}) is worker
        assert own_root(worker, {OWN_PROCESS_ROOT_ENV: str(busy.pid)}) is worker  # no ancestor
        assert own_root(worker, {OWN_PROCESS_ROOT_ENV: "x"}) is worker
    finally:
        for process in (busy, idle):
            process.kill()
            process.wait()
