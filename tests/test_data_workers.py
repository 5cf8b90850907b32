"""trm's data-build worker processes: results in the jobs' order, a job's own exception
raised in the caller, and a worker that dies is an error, not a wait."""

from __future__ import annotations

import os
import threading

import pytest

from trm.data.workers import UnreadableAnswer, WorkerDied, WorkerPool
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


class _TwoArguments(Exception):
    """An exception pickle cannot rebuild: its args hold one value, its __init__ takes two."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first} {second}")


def _raise_two_arguments(n: int) -> int:
    if n == 1:
        raise _TwoArguments("cannot", "rebuild")
    return n


class _FromNowhere:
    """A result whose unpickling imports a module that does not exist."""

    def __reduce__(self):
        import importlib

        return (importlib.import_module, ("trm_no_such_module_anywhere",))


def _answer_from_nowhere(n: int) -> object:
    return _FromNowhere() if n == 2 else n


def _collect_with_a_deadline(work, jobs, deadline_s: float = 60.0) -> tuple[list, BaseException]:
    """What imap yields and raises, in a thread the test does not wait on for ever."""
    seen: list = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            with WorkerPool(2) as pool:
                seen.extend(pool.imap(work, jobs))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline_s)
    assert not thread.is_alive(), "imap waited for an answer that never came"
    assert len(raised) == 1, seen
    return seen, raised[0]


@pytest.mark.parametrize(
    ("work", "fragment", "before"),
    [
        (_raise_two_arguments, "TypeError", [0]),
        (_answer_from_nowhere, "ModuleNotFoundError", [0, 1]),
    ],
)
def test_an_answer_that_cannot_be_read_is_an_error_not_a_wait(work, fragment, before):
    seen, raised = _collect_with_a_deadline(work, list(range(5)))
    assert isinstance(raised, UnreadableAnswer)
    assert fragment in str(raised) and work.__name__ in str(raised)
    assert seen == before  # the answers of the jobs before it came through
