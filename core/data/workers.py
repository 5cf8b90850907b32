"""Worker processes for data builds that never run the caller's script.

multiprocessing's spawn and forkserver start methods import the parent's ``__main__`` module
in every worker, so that functions defined there can be found. A script without an
``if __name__ == "__main__":`` guard then runs again in each worker: for a script that calls
``trm.train``, a second run that the run directory's lock refuses, in a pool that restarts the
failed worker forever. The jobs trm gives its workers are module-level functions of installed
modules, so a worker needs nothing of ``__main__``: each here is a fresh interpreter
(``python -c``) that takes the parent's ``sys.path``, then runs pickled ``(function, job)``
pairs read from its stdin and answers each on its stdout, until its stdin closes.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")

# What a worker runs: the standard library only until sys.path is the parent's.
_BOOTSTRAP = (
    "import pickle, sys\n"
    "sys.path[:] = pickle.load(sys.stdin.buffer)\n"
    "from trm.data.workers import serve\n"
    "serve()\n"
)


class WorkerDied(RuntimeError):
    """A worker process ended before answering its job (killed, out of memory, crashed)."""


class UnreadableAnswer(RuntimeError):
    """A worker's answer could not be read back in the caller (its unpickling raised: an
    exception whose class cannot be rebuilt from its arguments, a class of a module the
    caller cannot import)."""


def serve() -> None:
    """A worker's loop: answer ``(ok, value)`` to each ``(function, job)`` from stdin, where
    ``value`` is the function's result, or the exception it raised; return at end of input.
    Anything a job prints goes to stderr, so stdout carries answers only."""
    inbox = sys.stdin.buffer
    outbox = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        while True:
            try:
                work, job = pickle.load(inbox)
            except EOFError:
                return
            try:
                answer: tuple[bool, Any] = (True, work(job))
            except Exception as exc:
                answer = (False, exc)
            try:
                data = pickle.dumps(answer)
            except Exception as exc:
                data = pickle.dumps((False, RuntimeError(f"{work.__name__}: {exc!r}")))
            outbox.write(data)
            outbox.flush()
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent reports it
        os._exit(130)


class WorkerPool:
    """``processes`` worker processes; use as a context manager (leaving it ends them)."""

    def __init__(self, processes: int) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        path = pickle.dumps(list(sys.path))
        try:
            for _ in range(max(1, processes)):
                proc = subprocess.Popen(
                    [sys.executable, "-c", _BOOTSTRAP],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                self._procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(path)
                proc.stdin.flush()
        except BaseException:
            self.close(kill=True)
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.close(kill=kind is not None)

    def close(self, kill: bool = False) -> None:
        """End the workers: at end of input (they finish their job), or at once (``kill``)."""
        for proc in self._procs:
            if kill:
                proc.kill()
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
            except OSError:
                pass  # a worker that has gone already
        for proc in self._procs:
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def imap(self, work: Callable[[Job], Result], jobs: Sequence[Job]) -> Iterator[Result]:
        """``work(job)`` for each job, yielded in the jobs' order as they are done; the first
        failure (in order) raises the job's own exception, :class:`WorkerDied`, or
        :class:`UnreadableAnswer` (a worker whose answer could not be read is not asked
        again). Every job a worker takes is answered, so this never waits forever."""
        answers: dict[int, tuple[bool, Any]] = {}
        ready = threading.Condition()
        queue = iter(enumerate(jobs))

        def feed(proc: subprocess.Popen[bytes]) -> None:
            assert proc.stdin is not None and proc.stdout is not None
            while True:
                with ready:
                    item = next(queue, None)
                if item is None:
                    return
                index, job = item
                try:
                    answer = _ask(proc.stdin, proc.stdout, work, job)
                except BaseException as exc:  # every job taken gets an answer, or imap waits
                    answer = (False, _unreadable(work, exc))
                if answer is None:
                    code = proc.wait()
                    answer = (False, WorkerDied(f"a data worker process ended (exit code {code})"))
                with ready:
                    answers[index] = answer
                    ready.notify_all()
                if not answer[0]:
                    return

        feeders = [
            threading.Thread(target=feed, args=(proc,), name="trm-data-worker", daemon=True)
            for proc in self._procs
        ]
        for thread in feeders:
            thread.start()
        for index in range(len(jobs)):
            with ready:
                while index not in answers:
                    ready.wait()
                ok, value = answers.pop(index)
            if not ok:
                raise value
            yield value


def _unreadable(work: Callable[[Any], Any], exc: BaseException) -> UnreadableAnswer:
    name = getattr(work, "__name__", repr(work))
    return UnreadableAnswer(
        f"a data worker's answer to {name} could not be read: {type(exc).__name__}: {exc}"
    )


def _ask(
    inbox: IO[bytes], outbox: IO[bytes], work: Callable[[Any], Any], job: Any
) -> tuple[bool, Any] | None:
    """Send one job to a worker and read its answer; None when the worker has gone."""
    try:
        pickle.dump((work, job), inbox)
        inbox.flush()
        return pickle.load(outbox)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
