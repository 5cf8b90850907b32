"""trm's data-build worker processes: results in the jobs' order, a job's own exception
raised in the caller, and a worker that dies is an error, not a wait."""

from __future__ import annotations

import os

import pytest

from trm.data.workers import WorkerDied, WorkerPool
from trm.errors import TrmError


def _square(n: int) -> int:
    return n * n


def _refuse_three(n: int) -> int:
    if n == 3:
        raise TrmError("three is refused")
    return n


def _die(n: int) -> int:
    os._exit(3)


def test_results_come_in_the_jobs_order():
    with WorkerPool(2) as pool:
        assert list(pool.imap(_square, list(range(9)))) == [n * n for n in range(9)]


def test_a_job_error_reaches_the_caller_as_its_own_exception_after_the_jobs_before_it():
    seen = []
    with pytest.raises(TrmError, match="three is refused"), WorkerPool(2) as pool:
        for value in pool.imap(_refuse_three, list(range(6))):
            seen.append(value)
    assert seen == [0, 1, 2]


def test_a_worker_that_dies_is_an_error_not_a_wait():
    with pytest.raises(WorkerDied, match="exit code 3"), WorkerPool(2) as pool:
        list(pool.imap(_die, [1, 2]))
