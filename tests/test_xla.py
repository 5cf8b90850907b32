"""The xla backend on PyTorch/XLA's CPU device (``PJRT_DEVICE=CPU``), end to end through
``trm run``: the step compiled once, the device read at most once per metrics row, a loss
curve that follows the CPU backend's, SPMD over two devices and an exact resume; compiles and
reads counted by PyTorch/XLA's own counters.

These need ``torch_xla`` (the XLA venv that ``.ci/run`` builds: ``pytest -m xla
tests/test_xla.py``); elsewhere they are reported skipped with the reason. Runs share this
process (importing torch_xla takes tens of seconds) except where a second runtime is needed:
two devices (``CPU_NUM_DEVICES=2``, which must be set before the runtime starts) and a run
killed with SIGKILL.

The tolerances were measured here (docs/tpu.md, "What was run here"): XLA's CPU compiler
fuses and reorders float32 sums, so losses agree with eager CPU to about 1e-5 for the first
steps and drift as halting decisions (a threshold on a float) flip for single rows.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.tiny_run import build_tiny_data, metrics, summary, write_spec

HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None
ON_CPU_RUNTIME = os.environ.get("PJRT_DEVICE", "CPU") == "CPU"

pytestmark = [
    pytest.mark.xla,
    pytest.mark.skipif(
        not HAS_TORCH_XLA,
        reason="torch_xla is not installed: these run in the XLA venv (.ci/run; docs/tpu.md)",
    ),
    pytest.mark.skipif(
        not ON_CPU_RUNTIME,
        reason="the figures pinned here were measured on the CPU PJRT device (PJRT_DEVICE=CPU)",
    ),
]

if HAS_TORCH_XLA and ON_CPU_RUNTIME:
    # One device in this process; set before the XLA runtime starts (at the first run).
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = "1"
    # No XLA_PERSISTENT_CACHE_PATH: the CPU device cannot load saved executables.

QUICKSTART_STEPS = 56
STEADY_FROM_STEP = 6
"""Compilations are counted from this step on: the first steps compile the step's graphs."""
LOSS_STEP_TOLERANCE = 0.05
"""Largest |xla - cpu| loss of any of the quickstart's first steps (measured: 0.023 over 51
steps, 0.036 over 56)."""
LOSS_WINDOW_TOLERANCE = 0.01
"""Largest difference of 10-step mean losses (measured: 0.0042 and 0.0028 in two runs)."""
SPMD_WEIGHT_TOLERANCE = 1e-5
"""Largest |2 devices - 1 device| of any weight (and EMA weight) after 20 steps of the tiny
spec (measured: 2.4e-7 for the weights and the puzzle-embedding table, 1.8e-7 for EMA)."""


def _quiet_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    env.update(extra)
    return env


def start_xla_runtime() -> None:
    """Start the XLA runtime before anything in this process runs a backward pass: autograd
    sizes its per-device queues at the first backward, so a CPU run before the XLA devices
    exist leaves none for them (an INTERNAL ASSERT in autograd's engine)."""
    from trm.plugins.backends.xla import XLA

    XLA.start()


@pytest.fixture(scope="module")
def quickstart_runs(tmp_path_factory):
    """The quickstart's first steps on the CPU backend and on the xla backend (fp32 both,
    from the same built data), the latter with the counters read after every step."""
    from tests.xla_probe import run_recorded
    from trm.cli.main import main

    start_xla_runtime()
    base = tmp_path_factory.mktemp("quickstart")
    common = ["--max-steps", str(QUICKSTART_STEPS), "--checkpoint-every", "1000"]
    cpu_dir, xla_dir = base / "cpu", base / "xla"
    cpu_args = ["--set", "runtime.device=cpu", "--set", "runtime.precision=fp32"]
    cpu_args += ["--set", "runtime.threads=1"]
    code = main(["run", "quickstart", "--out", str(cpu_dir), *common, *cpu_args])
    assert code == 0
    shutil.copytree(cpu_dir / "data", xla_dir / "data")
    code, recorder = run_recorded(
        ["quickstart", "--out", str(xla_dir), *common, "--set", "runtime.device=xla"]
    )
    assert code == 0
    return cpu_dir, xla_dir, recorder


def _losses(run_dir: Path) -> dict[int, float]:
    return {row["step"]: row["loss"] for row in metrics(run_dir) if "kind" not in row}


def test_quickstart_on_xla_compiles_its_step_once_and_then_never_again(quickstart_runs):
    _, _, recorder = quickstart_runs
    counts = {row.step: row.compilations for row in recorder.rows}
    assert sorted(counts) == list(range(1, QUICKSTART_STEPS + 1))
    steady = [counts[s] for s in range(STEADY_FROM_STEP, QUICKSTART_STEPS + 1)]
    assert len(steady) >= 50
    assert len(set(steady)) == 1, f"compilations by step: {counts}"
    assert 1 <= steady[0] <= 4  # the training step's graph (and the first step's set-up)


def test_quickstart_on_xla_reads_the_device_once_per_metrics_row(quickstart_runs):
    _, _, recorder = quickstart_runs
    transfers = [row.host_transfers for row in recorder.rows]
    per_row = [b - a for a, b in itertools.pairwise(transfers)]
    assert set(per_row) == {1}, f"device-to-host transfers per step: {per_row}"
    fallbacks = [row.cpu_fallbacks for row in recorder.rows[STEADY_FROM_STEP - 1 :]]
    assert len(set(fallbacks)) == 1, f"operators run on the host during the steps: {fallbacks}"


def test_quickstart_loss_curve_on_xla_follows_the_cpu_backend(quickstart_runs):
    cpu_dir, xla_dir, _ = quickstart_runs
    cpu, xla = _losses(cpu_dir), _losses(xla_dir)
    assert sorted(cpu) == sorted(xla) == list(range(1, QUICKSTART_STEPS + 1))
    worst = max(abs(cpu[s] - xla[s]) for s in cpu)
    assert worst <= LOSS_STEP_TOLERANCE, f"largest per-step difference {worst:.4f}"
    steps = sorted(cpu)
    for start in range(0, len(steps) - 9, 10):
        window = steps[start : start + 10]
        cpu_mean = sum(cpu[s] for s in window) / 10
        xla_mean = sum(xla[s] for s in window) / 10
        assert abs(cpu_mean - xla_mean) <= LOSS_WINDOW_TOLERANCE, (window[0], cpu_mean, xla_mean)
    assert xla[steps[-1]] < xla[1] - 0.15  # it learns


def test_on_xla_a_step_and_an_evaluation_each_read_the_device_once(tmp_path, monkeypatch):
    """PyTorch/XLA's own transfer counter (every device-to-host copy, ``.tolist()`` and
    ``.numpy()`` included) between the hooks: exactly one per training step, and one per
    evaluation of two batches (8 examples, micro-batch 4). A checkpoint's copies (the "best"
    one after an evaluation) are counted apart and left out."""
    from tests.xla_probe import host_transfers, run_recorded
    from trm.loop.checkpoints import Checkpointer

    start_xla_runtime()
    saved: dict[int, int] = {}
    real_save = Checkpointer.save

    def counted_save(self, state, reason):
        before = host_transfers()
        real_save(self, state, reason)
        saved[state.step] = saved.get(state.step, 0) + host_transfers() - before

    monkeypatch.setattr(Checkpointer, "save", counted_save)
    spec = write_spec(tmp_path, build_tiny_data(tmp_path / "data"), eval_interval=2, max_steps=4)
    spec.write_text(spec.read_text().replace('device = "cpu"', 'device = "xla"'))
    args = [str(spec), "--out", str(tmp_path / "run"), "--checkpoint-every", "1000"]
    code, recorder = run_recorded(args, monkeypatch)
    assert code == 0
    events = [(row.step, "step", row.host_transfers) for row in recorder.rows]
    events += [(step, "eval", transfers) for step, transfers in recorder.evals]
    events.sort(key=lambda event: (event[0], event[1] == "eval"))
    assert [(step, kind) for step, kind, _ in events] == [
        (1, "step"),
        (2, "step"),
        (2, "eval"),
        (3, "step"),
        (4, "step"),
        (4, "eval"),
    ]
    reads = {
        (step, kind): b - a - (saved.get(step - 1, 0) if kind == "step" else 0)
        for (_, _, a), (step, kind, b) in itertools.pairwise(events)
    }
    assert set(reads.values()) == {1}, f"device-to-host transfers since the last hook: {reads}"


def test_on_xla_a_budgeted_run_is_bit_identical_to_the_same_steps_given(tmp_path, monkeypatch):
    """The budget's timing trains on the device first (drawing from its generator); the run
    it plans must still draw what a run given the same steps does: the device generator is
    seeded with the run, and the timing restores every generator it drew from."""
    from tests.test_budget import RealTimerFixedPlan
    from trm.cli.main import main

    start_xla_runtime()
    data = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data, time_budget_s=10, checkpoint_interval_steps=0)
    spec.write_text(spec.read_text().replace('device = "cpu"', 'device = "xla"'))
    monkeypatch.setattr("trm.api.training.time_depths", RealTimerFixedPlan())
    budgeted, given = tmp_path / "budgeted", tmp_path / "given"
    assert main(["run", str(spec), "--out", str(budgeted)]) == 0
    assert main(["run", str(spec), "--out", str(given), "--set", "train.max_steps=10"]) == 0
    assert summary(budgeted)["steps"] == summary(given)["steps"] == 10
    assert summary(budgeted)["final_weights_sha256"] == summary(given)["final_weights_sha256"]


def test_out_of_memory_at_the_step_boundary_on_xla_stops_the_run_without_a_retry(
    tmp_path, monkeypatch, capsys
):
    """XLA runs a step's graph at the step boundary (``torch_xla.sync()``), after the carry was
    written and the update traced: a RESOURCE_EXHAUSTED there cannot be undone, so the run
    stops with one line and the last good checkpoint, and never retries the step (which would
    advance the optimizers' step counts twice)."""
    from trm.cli.main import main
    from trm.plugins.backends.xla import XlaBackend

    start_xla_runtime()
    spec = write_spec(tmp_path, build_tiny_data(tmp_path / "data"), eval_interval=1000)
    spec.write_text(spec.read_text().replace('device = "cpu"', 'device = "xla"'))
    real_mark_step = XlaBackend.mark_step
    boundaries: list[int] = []

    def failing_third_boundary(self, device):
        boundaries.append(1)
        if len(boundaries) == 3:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 123456 bytes.")
        real_mark_step(self, device)

    monkeypatch.setattr(XlaBackend, "mark_step", failing_third_boundary)
    run_dir = tmp_path / "run"
    capsys.readouterr()
    code = main(["run", str(spec), "--out", str(run_dir), "--plugins", "memory-guard"])
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("trm: error:")]
    assert len(errors) == 1 and "step 3: out of memory" in errors[0], err[-2000:]
    assert "cannot be retried" in errors[0] and "step 2" in errors[0]
    assert "retrying" not in err
    assert len(boundaries) == 3  # the step was not taken again
    assert summary(run_dir)["stopped"] == "failed" and summary(run_dir)["checkpoint_step"] == 2
    events = [row for row in metrics(run_dir) if row.get("kind") == "event"]
    assert not any(row.get("event") == "out_of_memory" for row in events)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny spec (puzzle embeddings, EMA, micro-batches of 4 of a global batch of 8) on
    the xla backend in fp32, 20 steps."""
    start_xla_runtime()
    base = tmp_path_factory.mktemp("tiny-xla")
    spec = write_spec(base, build_tiny_data(base / "data"), max_steps=20, eval_interval=10)
    text = spec.read_text().replace('device = "cpu"', 'device = "xla"')
    spec.write_text(text)
    return base, spec


def _trm_process(spec: Path, run_dir: Path, log: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "trm", "run", str(spec), "--out", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=_quiet_env(PJRT_DEVICE="CPU", **env),
        start_new_session=True,
    )


def _final_checkpoint(run_dir: Path) -> Path:
    return max((run_dir / "checkpoints").glob("step-*.pt"))


def test_two_devices_with_spmd_give_one_devices_weights(tiny):
    from trm.cli.main import main

    base, spec = tiny
    one, two = base / "one-device", base / "two-devices"
    log = base / "two-devices.log"
    process = _trm_process(spec, two, log, CPU_NUM_DEVICES="2")
    assert main(["run", str(spec), "--out", str(one)]) == 0
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert "SPMD data parallel over 2 devices" in log.read_text()
    single = torch.load(_final_checkpoint(one), map_location="cpu", weights_only=True)
    double = torch.load(_final_checkpoint(two), map_location="cpu", weights_only=True)
    assert single["step"] == double["step"] == 20
    assert any("puzzle_emb" in name for name in single["model"])
    worst = {}
    for part, a, b in (
        ("model", single["model"], double["model"]),
        ("ema", single["ema"]["shadow"], double["ema"]["shadow"]),
    ):
        assert a.keys() == b.keys()
        worst[part] = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    assert max(worst.values()) <= SPMD_WEIGHT_TOLERANCE, f"largest differences: {worst}"


def test_on_two_devices_the_plan_chooses_a_micro_batch_they_divide(tiny):
    """The tiers' micro-batch is left to the plan (``runtime.micro_batch_size = 0``), as the
    quickstart leaves it: every size the plan tries, and the one it keeps, divides by the two
    devices (the backend's ``replicas()``), so the run trains instead of being refused by the
    backend's own check."""
    base, spec = tiny
    auto = base / "auto-micro"
    auto.mkdir()
    text = spec.read_text().replace("micro_batch_size = 4", "micro_batch_size = 0")
    assert "micro_batch_size = 0" in text
    (auto / "tiny.toml").write_text(text)
    log = base / "auto-micro.log"
    run_dir = base / "auto-micro-run"
    args = ["run", str(auto / "tiny.toml"), "--out", str(run_dir), "--max-steps", "2"]
    process = subprocess.Popen(
        [sys.executable, "-m", "trm", *args],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=_quiet_env(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2"),
    )
    assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
    rows = [row for row in metrics(run_dir) if "kind" not in row]
    assert [row["step"] for row in rows] == [1, 2]
    assert all(row["micro_batch_size"] % 2 == 0 for row in rows), rows


def test_killed_and_resumed_on_xla_ends_bit_identical(tiny):
    from trm.cli.main import main

    base, spec = tiny
    reference, killed = base / "reference", base / "killed"
    assert main(["run", str(spec), "--out", str(reference)]) == 0
    log = base / "killed.log"
    process = _trm_process(spec, killed, log)
    deadline = time.monotonic() + 600
    rows = killed / "metrics.jsonl"
    while process.poll() is None and time.monotonic() < deadline:
        if rows.exists() and rows.read_text().count('"samples_per_s"') >= 7:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    process.wait()
    assert process.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    assert main(["run", str(spec), "--out", str(killed)]) == 0
    assert summary(killed)["final_weights_sha256"] == summary(reference)["final_weights_sha256"]
    steps = [row["step"] for row in metrics(killed) if "kind" not in row]
    assert steps == list(range(1, 21))
