"""Exact resume: ``trm run`` killed with SIGKILL and resumed ends bit-identical on CPU.

Each scenario runs ``python -m trm run`` as a real subprocess on the tiny spec (one thread,
a checkpoint every step), kills it, resumes it with the same command, and compares with an
uninterrupted run: summary.json's final_weights_sha256 must be equal, and metrics.jsonl must
hold every step exactly once. The killed runs are subprocesses, side by side in threads; the
uninterrupted run and each scenario's last, resuming run end by themselves, so they run in
this process (``tests.tiny_run.run_here``), one at a time in the main thread, each saving a
Python and torch start-up.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.tiny_run import (
    EVAL_INTERVAL,
    GLOBAL_BATCH,
    TOTAL_STEPS,
    build_tiny_data,
    eval_steps,
    run_here,
    summary,
    train_steps,
    write_spec,
)

PROCESS_TIMEOUT_S = 180.0


class Phase:
    """One process of a scenario: how it ended and what it printed."""

    def __init__(self, code: int, err: str) -> None:
        self.code, self.err = code, err


def _trm(run_dir: Path, spec: Path, log: Path, faults: str = "") -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    args = [sys.executable, "-m", "trm", "run", str(spec), "--out", str(run_dir)]
    if faults:
        env["TRM_FAULTS"] = faults
        args += ["--plugins", "faults"]
    return subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env, start_new_session=True
    )


def _finish(process: subprocess.Popen, log: Path) -> Phase:
    try:
        process.wait(timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return Phase(process.returncode, log.read_text())


def _run(run_dir: Path, spec: Path, name: str, faults: str = "") -> Phase:
    log = run_dir.parent / f"{run_dir.name}-{name}.log"
    return _finish(_trm(run_dir, spec, log, faults), log)


def _run_here(run_dir: Path, spec: Path, name: str) -> Phase:
    """The run in this process (tests.tiny_run.run_here), with the log a subprocess writes."""
    return Phase(*run_here(spec, run_dir, run_dir.parent / f"{run_dir.name}-{name}.log"))


def _run_and_kill(run_dir: Path, spec: Path, name: str, when: Callable[[], bool]) -> Phase:
    """Start a run and SIGKILL it the first moment ``when()`` holds (polled every ~1 ms)."""
    log = run_dir.parent / f"{run_dir.name}-{name}.log"
    process = _trm(run_dir, spec, log)
    while process.poll() is None:
        if when():
            os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.001)
    return _finish(process, log)


def _train_rows_at_least(run_dir: Path, count: int) -> Callable[[], bool]:
    path = run_dir / "metrics.jsonl"

    def check() -> bool:
        try:
            return path.read_text().count('"samples_per_s"') >= count
        except OSError:
            return False

    return check


def _exists(path: Path) -> Callable[[], bool]:
    return path.exists


class Killed:
    """A scenario's killed processes, and the spec its last, resuming run is given."""

    def __init__(self, phases: list[Phase], spec: Path) -> None:
        self.phases, self.spec = phases, spec


def _killed_mid_step(base: Path, spec: Path) -> Killed:
    run_dir = base / "mid-step"
    return Killed([_run_and_kill(run_dir, spec, "kill", _train_rows_at_least(run_dir, 3))], spec)


def _killed_inside_a_checkpoint_write(base: Path, spec: Path) -> Killed:
    run_dir = base / "in-save"
    killed = _run(run_dir, spec, "kill", faults="kill-in-save@7")
    leftovers = sorted(p.name for p in (run_dir / "checkpoints").glob(".step-*.tmp"))
    killed.err += f"\nleftovers: {leftovers}\n"
    return Killed([killed], spec)


def _killed_twice(base: Path, spec: Path) -> Killed:
    run_dir = base / "twice"
    fifth = run_dir / "checkpoints" / "step-00000005.pt"
    return Killed(
        [
            _run_and_kill(run_dir, spec, "kill1", _exists(fifth)),
            _run_and_kill(run_dir, spec, "kill2", _train_rows_at_least(run_dir, 10)),
        ],
        spec,
    )


def _streamed_killed_mid_step(base: Path, spec: Path) -> Killed:
    """The stream reader (prefetching 2 steps ahead) instead of the memory reader."""
    run_dir = base / "stream-mid-step"
    streamed = base / "stream.toml"
    streamed.write_text(
        spec.read_text().replace("[data]\n", '[data]\nreader = "stream"\nprefetch_steps = 2\n')
    )
    killed = _run_and_kill(run_dir, streamed, "kill", _train_rows_at_least(run_dir, 4))
    return Killed([killed], streamed)


# Each scenario's killed processes; its last run resumes in the folder of the scenario's name.
KILLED: dict[str, Callable[[Path, Path], Killed]] = {
    "mid-step": _killed_mid_step,
    "in-save": _killed_inside_a_checkpoint_write,
    "twice": _killed_twice,
    "stream-mid-step": _streamed_killed_mid_step,
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> tuple[Path, dict[str, list[Phase]]]:
    """Each scenario's phases (the uninterrupted run's one phase as ``reference``): the killed
    subprocesses in threads, while this thread runs the reference, then each scenario's
    resume as its kills end."""
    base = tmp_path_factory.mktemp("resume")
    spec = write_spec(base, build_tiny_data(base / "data"))
    with ThreadPoolExecutor(max_workers=len(KILLED)) as pool:
        futures = {name: pool.submit(kill, base, spec) for name, kill in KILLED.items()}
        results = {"reference": [_run_here(base / "reference", spec, "run")]}
        for name, future in futures.items():
            killed = future.result()
            results[name] = [*killed.phases, _run_here(base / name, killed.spec, "resume")]
    return base, results


def _resumed_from(err: str) -> int:
    match = re.search(r"resumed from step (\d+)", err)
    assert match, f"the run did not resume:\n{err}"
    return int(match.group(1))


def _assert_same_as_reference(base: Path, name: str, phases: list[Phase]) -> None:
    *kills, last = phases
    for phase in kills:
        assert phase.code == -signal.SIGKILL, f"{name}: expected a SIGKILL\n{phase.err}"
    assert last.code == 0, last.err
    reference, run_dir = summary(base / "reference"), base / name
    resumed = summary(run_dir)
    assert resumed["final_weights_sha256"] == reference["final_weights_sha256"]
    assert (resumed["steps"], resumed["samples"]) == (TOTAL_STEPS, TOTAL_STEPS * GLOBAL_BATCH)
    assert train_steps(run_dir) == list(range(1, TOTAL_STEPS + 1))
    assert eval_steps(run_dir) == eval_steps(base / "reference")


@pytest.mark.slow
def test_uninterrupted_reference_run_finishes(outcomes):
    base, results = outcomes
    (phase,) = results["reference"]
    assert phase.code == 0, phase.err
    expected_evals = [*range(EVAL_INTERVAL, TOTAL_STEPS + 1, EVAL_INTERVAL), TOTAL_STEPS]
    assert eval_steps(base / "reference") == sorted(set(expected_evals))
    assert len(summary(base / "reference")["final_weights_sha256"]) == 64


def test_sigkill_in_the_middle_of_a_step_resumes_bit_identical(outcomes):
    base, results = outcomes
    _assert_same_as_reference(base, "mid-step", results["mid-step"])
    assert _resumed_from(results["mid-step"][1].err) >= 2


def test_sigkill_inside_a_checkpoint_write_resumes_bit_identical_from_the_previous(outcomes):
    base, results = outcomes
    killed, resumed = results["in-save"]
    assert "leftovers: ['.step-00000007.pt.injected.tmp']" in killed.err
    _assert_same_as_reference(base, "in-save", results["in-save"])
    assert _resumed_from(resumed.err) == 6
    assert not list((base / "in-save" / "checkpoints").glob(".step-*.tmp"))


def test_sigkill_twice_at_different_points_resumes_bit_identical(outcomes):
    base, results = outcomes
    _first_kill, second_kill, last = results["twice"]
    _assert_same_as_reference(base, "twice", results["twice"])
    assert _resumed_from(second_kill.err) >= 5  # killed as step 5's checkpoint appeared
    assert _resumed_from(last.err) >= 9


def test_the_stream_reader_reads_what_the_memory_reader_reads_and_resumes_bit_identical(outcomes):
    """Prefetching on a thread never changes which rows a step reads: a streamed run killed
    mid-step and resumed ends bit-identical to the uninterrupted memory-reader run."""
    base, results = outcomes
    _assert_same_as_reference(base, "stream-mid-step", results["stream-mid-step"])
    killed, resumed = results["stream-mid-step"]
    assert (
        "data reader: stream" in killed.err and "data reader: memory" in results["reference"][0].err
    )
    assert _resumed_from(resumed.err) >= 3
