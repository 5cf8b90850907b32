"""How many of this process's CPUs other processes keep busy, and the thread count that
follows it (a helper for the cpu backend; not a plugin itself).

The reading: the busy and total time of each CPU this process may run on and the CPU time
of trm's own processes — this one, every process it started that still runs (data workers,
a sweep's trial workers) and those it has waited for, and, in a sweep's worker, its sibling
workers (the sweep names its own process in ``TRM_OWN_PROCESS_ROOT``) — taken twice, by
psutil on every platform; the CPUs' busy time minus trm's own, over the window, is what
other processes held, in CPUs.
The load average is not used: it is a one-minute damped mean (a process started ten
seconds ago shows as a sixth of one), it counts tasks waiting on disk that hold no CPU, and it
cannot tell trm's own threads from others'.

The count: one thread per usable physical core, less the CPUs others hold (rounded to the
nearest whole CPU), at least one. OpenMP threads that share a core with a busy process wait
for it at every parallel region, so a thread fewer is faster than a thread that waits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import psutil
from attrs import define, frozen

from trm.hardware import OWN_PROCESS_ROOT_ENV

# Seconds the first reading spans, before training: long enough to see a busy process.
START_WINDOW_S = 0.25
# Seconds between the readings that follow the machine during a run.
WATCH_INTERVAL_S = 3.0
# Readings in a row that must agree on a new count before it is used.
SETTLE_READINGS = 2


@frozen
class CpuTimes:
    """One reading: ``busy_s`` and ``total_s`` summed over ``cpus`` CPUs (those this process
    may use), the CPU time of trm's own processes ``own_s`` (:func:`own_cpu_s`), and
    ``wall_s`` a monotonic clock."""

    cpus: int
    busy_s: float
    total_s: float
    own_s: float
    wall_s: float


def own_cpu_s(process: Any) -> float:
    """CPU seconds (user and system) of ``process`` (a ``psutil.Process``), of each of its
    descendants still running, and of the children it has waited for. A descendant that
    ends while it is read is left out."""
    times = process.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in process.children(recursive=True):
        try:
            child_times = child.cpu_times()
        except psutil.Error:  # ended (or out of reach) meanwhile
            continue
        total += child_times.user + child_times.system
    return float(total)


def own_root(process: Any, environ: Mapping[str, str] = os.environ) -> Any:
    """The process whose tree is trm's own work: the one ``TRM_OWN_PROCESS_ROOT`` names when
    it is an ancestor of ``process`` (a sweep's parent, for its trial workers), else
    ``process``. A value that is no process id, or names no ancestor, is ignored."""
    text = environ.get(OWN_PROCESS_ROOT_ENV, "")
    if not text.isdigit():
        return process
    try:
        for ancestor in process.parents():
            if ancestor.pid == int(text):
                return ancestor
    except psutil.Error:
        pass
    return process


def _busy_and_total_s(times: Any) -> tuple[float, float]:
    """One CPU's busy and total seconds from psutil's ``cpu_times(percpu=True)`` entry: the
    guest fields are left out of the total (Linux counts them in ``user`` already), and
    waiting on disk (``iowait``) is idle."""
    fields = times._asdict()
    total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
    idle = fields["idle"] + fields.get("iowait", 0.0)
    return total - idle, total


def read_cpu_times(
    process: Any = None, per_cpu: Callable[[], list[Any]] | None = None
) -> CpuTimes | None:
    """This machine's reading now (``process``: this process; ``per_cpu``: psutil's
    per-CPU times, both injectable); None where psutil cannot read them."""
    try:
        process = process if process is not None else psutil.Process()
        cpus = per_cpu() if per_cpu is not None else psutil.cpu_times(percpu=True)
        try:
            mine = set(process.cpu_affinity())
        except (AttributeError, psutil.Error):  # macOS has no affinity: every CPU
            mine = set(range(len(cpus)))
        own_s = own_cpu_s(own_root(process))
    except (psutil.Error, OSError):
        return None
    busy = total = 0.0
    used = 0
    for number, times in enumerate(cpus):
        if number in mine:
            cpu_busy, cpu_total = _busy_and_total_s(times)
            busy, total, used = busy + cpu_busy, total + cpu_total, used + 1
    if used == 0:
        return None
    return CpuTimes(used, busy, total, own_s, time.monotonic())


def others_busy_cpus(before: CpuTimes, after: CpuTimes) -> float:
    """The CPUs other processes held between two readings (0 when the window is empty)."""
    window_s = (after.total_s - before.total_s) / max(1, after.cpus)
    if window_s <= 0:
        return 0.0
    others_s = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return min(float(after.cpus), max(0.0, others_s / window_s))


def fit_threads(usable_cores: int, cpus: int, others: float) -> int:
    """Threads for ``usable_cores`` physical cores on ``cpus`` CPUs when others hold
    ``others`` of them: the usable cores, at most the CPUs left free, at least one."""
    free = cpus - int(others + 0.5)
    return max(1, min(usable_cores, free))


def measure_start(
    read: Callable[[], CpuTimes | None] = read_cpu_times,
    sleep: Callable[[float], None] = time.sleep,
    window_s: float = START_WINDOW_S,
) -> tuple[CpuTimes, float] | None:
    """The last reading and the CPUs others held over ``window_s``; None where unreadable."""
    before = read()
    if before is None:
        return None
    sleep(window_s)
    after = read()
    if after is None:
        return None
    return after, others_busy_cpus(before, after)


@define
class ThreadWatch:
    """Follows the machine during a run: every ``interval_s`` it reads the CPUs others hold
    and, when :func:`fit_threads` gives a new count ``settle`` readings in a row, answers it
    with the reason. ``usable_cores`` caps the count (the count with nothing else running).
    ``read`` and ``clock`` are injectable (tests give their own readings)."""

    usable_cores: int
    threads: int
    last: CpuTimes
    read: Callable[[], CpuTimes | None] = read_cpu_times
    clock: Callable[[], float] = time.monotonic
    interval_s: float = WATCH_INTERVAL_S
    settle: int = SETTLE_READINGS
    _wanted: int | None = None
    _agreeing: int = 0

    def after_step(self) -> tuple[int, str] | None:
        """A new thread count and why, or None (no reading due, or no change settled)."""
        if self.clock() - self.last.wall_s < self.interval_s:
            return None
        now = self.read()
        if now is None:
            return None
        before, self.last = self.last, now
        others = others_busy_cpus(before, now)
        wanted = fit_threads(self.usable_cores, now.cpus, others)
        if wanted == self.threads:
            self._wanted, self._agreeing = None, 0
            return None
        if wanted != self._wanted:
            self._wanted, self._agreeing = wanted, 0
        self._agreeing += 1
        if self._agreeing < self.settle:
            return None
        old, self.threads = self.threads, wanted
        self._wanted, self._agreeing = None, 0
        window_s = now.wall_s - before.wall_s
        if wanted < old:
            why = (
                f"other processes held {others:.1f} of the {now.cpus} CPUs over the last "
                f"{window_s:.0f} s, so {old} threads would wait for them"
            )
        else:
            why = (
                f"other processes now hold {others:.1f} of the {now.cpus} CPUs (last "
                f"{window_s:.0f} s): {wanted - old} more free"
            )
        return wanted, why
