"""What the data sources that generate puzzles share: independent seed streams, work over
index ranges in worker processes (:mod:`trm.data.workers`), progress in quarters, and a
seeded subset of rows.

Generated data must not depend on how the work was split: puzzle ``i`` is made from
``(seed, i)`` alone, so any number of workers gives the same arrays (the sources' tests pin
this).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from trm.data.workers import WorkerPool
from trm.hardware import allowed_cpu_count

Job = TypeVar("Job")
Part = tuple[np.ndarray, np.ndarray]


def stream_seed(seed: int, stream: int) -> int:
    """A 64-bit seed for one purpose (``stream``) of a build seeded with ``seed``."""
    state = np.random.SeedSequence([seed % 2**63, stream]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 32 | int(state[1])


def resolve_workers(workers: int) -> int:
    """``workers``, or every core this process may use when it is 0."""
    if workers > 0:
        return workers
    return allowed_cpu_count()


def index_ranges(start: int, stop: int, pieces: int) -> list[tuple[int, int]]:
    """``[start, stop)`` cut into at most ``pieces`` non-empty ranges of near-equal length."""
    bounds = np.linspace(start, stop, max(1, pieces) + 1).astype(np.int64).tolist()
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def run_jobs(
    work: Callable[[Job], Part],
    jobs: Sequence[Job],
    workers: int,
    progress: Callable[[int], None] | None = None,
    done: int = 0,
) -> list[Part]:
    """``work(job)`` for every job, in order: in this process when there is at most one job,
    otherwise in ``workers`` processes of a :class:`~trm.data.workers.WorkerPool` (``work``
    must be a module-level function of an importable module; the caller's ``__main__`` is
    never run again, so a script without an ``if __name__ == "__main__":`` guard builds
    too). ``progress`` gets the rows done so far (``done`` plus the first array's rows of
    each part): after each part from the pool, once at the end in this process."""
    if len(jobs) <= 1:
        parts = [work(job) for job in jobs]
        if progress is not None and parts:
            progress(done + sum(part[0].shape[0] for part in parts))
        return parts
    parts = []
    with WorkerPool(min(workers, len(jobs))) as pool:
        for part in pool.imap(work, jobs):
            parts.append(part)
            done += part[0].shape[0]
            if progress is not None:
                progress(done)
    return parts


def quarter_progress(log: Callable[[str], None], what: str, total: int) -> Callable[[int], None]:
    """A progress callback that logs ``"{what}: done/total"`` at each further quarter."""
    last = [0]

    def report(done: int) -> None:
        quarter = done * 4 // max(1, total)
        if quarter > last[0]:
            last[0] = quarter
            log(f"{what}: {done}/{total}")

    return report


def random_subset(arrays: tuple[np.ndarray, ...], count: int, seed: int) -> tuple[np.ndarray, ...]:
    """``count`` rows chosen at random (the same rows of every array), kept in their order;
    the arrays unchanged when ``count`` is 0 or at least their length."""
    rows_total = arrays[0].shape[0]
    if count <= 0 or count >= rows_total:
        return arrays
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(rows_total, size=count, replace=False))
    return tuple(array[rows] for array in arrays)
