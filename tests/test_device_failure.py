"""A device that fails mid-run, end to end through ``trm run``.

The faults plugin makes the device fail as CUDA does (``torch.AcceleratorError``: an illegal
memory access) at step 5 of the tiny run: the run must stop with the checkpoint of step 4,
exit 1 with one line naming the error (a traceback only with --debug). Its checkpoint is then
made to look as a GPU run writes it (trained on cuda:0, with CUDA RNG states), and
``trm run --resume auto --set runtime.device=cpu`` must continue it to the end, saying in one
line that the device changed and what became of the carry and the RNG.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.tiny_run import TOTAL_STEPS, build_tiny_data, checkpoint_steps, summary, write_spec
from trm.loop.device_failure import device_changed, is_device_failure

FAIL_AT_STEP = 5


def trm_run(
    spec: Path, run_dir: Path, *extra: str, faults: str = ""
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    args = [sys.executable, "-m", "trm", "run", str(spec), "--out", str(run_dir), *extra]
    if faults:
        env["TRM_FAULTS"] = faults
        args += ["--plugins", "faults"]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)


def as_a_gpu_run_records_it(checkpoint: Path) -> None:
    """Rewrite ``checkpoint`` as a run on cuda:0 writes it: its device, its spec's device and
    the CUDA generator states next to the CPU's (then its SHA-256 record)."""
    payload = torch.load(checkpoint, map_location="cpu", weights_only=True)
    payload["device"] = "cuda:0"
    payload["spec"]["runtime"]["device"] = "cuda"
    payload["rng"]["cuda"] = [torch.get_rng_state()]  # a CUDA generator's state is bytes too
    payload.pop("loaded_from", None)
    torch.save(payload, checkpoint)
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    checkpoint.with_name(checkpoint.name + ".sha256").write_text(f"{digest}  {checkpoint.name}\n")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("device-failure")
    data = build_tiny_data(base / "data")
    return base, write_spec(base, data)


@pytest.mark.slow
def test_a_failed_device_stops_at_the_last_checkpoint_and_resumes_on_the_cpu(tiny):
    base, spec = tiny
    run_dir = base / "run"
    failed = trm_run(spec, run_dir, faults=f"device-error@{FAIL_AT_STEP}")
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("trm: error:")]
    assert len(errors) == 1 and errors[0] == failed.stderr.strip().splitlines()[-1]
    assert "CUDA error: an illegal memory access was encountered" in errors[0]
    assert f"after step {FAIL_AT_STEP - 1}" in errors[0]
    assert f"the checkpoint of step {FAIL_AT_STEP - 1} is intact" in errors[0]
    assert "--set runtime.device=cpu" in errors[0]
    assert checkpoint_steps(run_dir)[-1] == FAIL_AT_STEP - 1  # nothing saved after the failure
    record = summary(run_dir)
    assert record["stopped"] == "failed" and "illegal memory access" in record["error"]

    newest = run_dir / "checkpoints" / f"step-{FAIL_AT_STEP - 1:08d}.pt"
    as_a_gpu_run_records_it(newest)
    resumed = trm_run(spec, run_dir, "--resume", "auto", "--set", "runtime.device=cpu")
    assert resumed.returncode == 0, resumed.stderr
    changed = [line for line in resumed.stderr.splitlines() if "device changed" in line]
    assert len(changed) == 1, resumed.stderr
    line = changed[0]
    assert f"step {FAIL_AT_STEP - 1} was trained on cuda:0" in line and "trains on cpu" in line
    assert "carry" in line and "moved to cpu" in line
    assert "RNG states cannot be restored" in line and "differ" in line
    assert "UserWarning" not in resumed.stderr
    assert summary(run_dir)["steps"] == TOTAL_STEPS


def test_with_debug_the_failure_shows_its_traceback(tiny):
    base, spec = tiny
    failed = trm_run(spec, base / "debug", "--debug", faults="device-error@2")
    assert failed.returncode == 1
    assert "Traceback" in failed.stderr and "AcceleratorError" in failed.stderr


def test_only_accelerator_errors_count_as_a_failed_device():
    assert is_device_failure(torch.AcceleratorError("CUDA error: unspecified launch failure"))
    assert not is_device_failure(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_device_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_under_torchrun_each_rank_on_its_own_gpu_is_no_device_change():
    rank_one = torch.device("cuda:1")
    assert not device_changed("cuda:0", rank_one, compare_index=False)
    assert device_changed("cuda:0", rank_one, compare_index=True)  # one process: another GPU
    assert device_changed("cuda:0", torch.device("cpu"), compare_index=False)
    assert not device_changed("cuda", torch.device("cuda:0"), compare_index=True)
