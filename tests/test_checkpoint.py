"""Checkpoints and clean stops, through the real ``trm run`` (in process) on the tiny spec.

Corrupt or unsafe checkpoints are refused or skipped, incompatible ones are refused with the
differing keys, failed writes keep the previous checkpoint, the best survives rotation,
SIGINT/SIGTERM stop after a checkpoint with exit 130 and a resume command, a non-finite loss
stops the run naming the step, and the preflight refuses unusable run directories.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import trm.plan.run_dir as run_dir_module
from tests.conftest import error_lines
from tests.tiny_run import (
    TOTAL_STEPS,
    build_tiny_data,
    checkpoint_steps,
    events,
    metrics,
    summary,
    train_steps,
    write_spec,
)
from trm.cli.main import main
from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.loop.checkpoints import CheckpointSchedule, parse_interval
from trm.plan.run_dir import estimate_checkpoint_bytes
from trm.plugins.operations import checkpoint as checkpoint_plugin
from trm.spec import load_spec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The dataset, the spec and one finished reference run (keep 3, eval every 5 steps)."""
    base = tmp_path_factory.mktemp("checkpoint")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data)
    reference = base / "reference"
    assert main(["run", str(spec), "--out", str(reference)]) == 0
    return SimpleNamespace(base=base, data=data, spec=spec, reference=reference)


@pytest.fixture
def copy_of_reference(tiny, tmp_path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(tiny.reference, target)
    return target


def _newest(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / f"step-{checkpoint_steps(run_dir)[-1]:08d}.pt"


class _RunsCode:
    """A pickled object whose loading would run code (it creates a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_holds_everything_needed_to_continue(tiny):
    payload = torch.load(_newest(tiny.reference), weights_only=True)
    for key in ("model", "ema", "optimizers", "carry", "spec", "trm_version", "dataset_shape"):
        assert payload[key], key
    assert payload["step"] == TOTAL_STEPS == payload["data_position"]["next_step"]
    assert payload["total_steps"] == TOTAL_STEPS
    assert set(payload["rng"]) >= {"python", "numpy", "torch_cpu"}
    assert payload["optimizers"][-1]["param_groups"][0]["lr"] > 0  # the schedule's position
    assert (_newest(tiny.reference).with_suffix(".pt.sha256")).read_text().split()[0] == (
        checkpoint_plugin.file_sha256(_newest(tiny.reference))
    )


def test_truncated_newest_checkpoint_falls_back_to_the_previous_with_a_warning(
    tiny, copy_of_reference, cli
):
    newest = _newest(copy_of_reference)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    result = cli("run", tiny.spec, "--out", copy_of_reference)
    assert result.code == 0, result.err
    assert f"warning: checkpoint {newest} does not match its recorded SHA-256" in result.err
    assert f"resumed from step {TOTAL_STEPS - 1}" in result.err
    assert (
        summary(copy_of_reference)["final_weights_sha256"]
        == summary(tiny.reference)["final_weights_sha256"]
    )
    assert train_steps(copy_of_reference) == list(range(1, TOTAL_STEPS + 1))


def test_corrupt_checkpoint_without_its_sha256_record_is_still_refused(tmp_path, tiny):
    copy = tmp_path / "ckpt.pt"
    data = bytearray(_newest(tiny.reference).read_bytes())
    copy.write_bytes(bytes(data[: len(data) - 200]))
    with pytest.raises(TrmError, match="cannot be read"):
        checkpoint_plugin.read_checkpoint(copy)


def test_checkpoint_carrying_pickled_code_is_refused_not_run(tiny, copy_of_reference, cli):
    marker = copy_of_reference / "code-ran"
    payload = torch.load(_newest(copy_of_reference), weights_only=True)
    payload["model"] = {"evil": _RunsCode(marker)}
    evil = copy_of_reference / "checkpoints" / "step-00000099.pt"
    torch.save(payload, evil)
    digest = checkpoint_plugin.file_sha256(evil)
    evil.with_name(evil.name + ".sha256").write_text(f"{digest}  {evil.name}\n")

    result = cli("eval", evil)
    assert result.code == 2
    (line,) = error_lines(result.err)
    assert "was refused: it carries pickled code" in line
    result = cli("run", tiny.spec, "--out", copy_of_reference)  # newest refused: previous used
    assert result.code == 0, result.err
    assert f"warning: checkpoint {evil} was refused" in result.err
    assert not marker.exists()


def test_incompatible_architecture_is_refused_listing_the_differing_keys(
    tiny, copy_of_reference, cli
):
    result = cli("run", tiny.spec, "--out", copy_of_reference, "--set", "arch.hidden_size=32")
    assert result.code == 2
    (line,) = error_lines(result.err)
    assert "does not fit this run's architecture" in line
    assert "arch.hidden_size: 16 in the checkpoint, 32 here" in line
    assert "model key embed_tokens.weight: shape [" in line
    assert "--resume never" in line


def test_changed_training_settings_resume_with_a_warning(tiny, copy_of_reference, cli):
    result = cli(
        "run", tiny.spec, "--out", copy_of_reference, "--set", f"train.max_steps={TOTAL_STEPS + 2}"
    )
    assert result.code == 0, result.err
    assert f"train.max_steps was {TOTAL_STEPS}, now {TOTAL_STEPS + 2}" in result.err
    assert summary(copy_of_reference)["steps"] == TOTAL_STEPS + 2


def test_failed_write_raises_oserror_and_keeps_the_previous_checkpoint(
    tiny, copy_of_reference, monkeypatch
):
    before = checkpoint_steps(copy_of_reference)
    newest = _newest(copy_of_reference)
    payload = torch.load(newest, weights_only=True)
    state = SimpleNamespace(
        step=TOTAL_STEPS + 1,
        spec=load_spec(tiny.spec),
        best_step=0,
        last_eval={},
        state_dict=lambda: payload,
    )

    def disk_fills_up(obj, handle):
        handle.write(b"PK\x03\x04 partial")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(checkpoint_plugin.torch, "save", disk_fills_up)
    with pytest.raises(OSError, match="file write failed"):
        checkpoint_plugin.save_checkpoint(state, copy_of_reference, "interval")
    assert checkpoint_steps(copy_of_reference) == before
    assert not [p for p in (copy_of_reference / "checkpoints").iterdir() if p.name.startswith(".")]
    assert checkpoint_plugin.read_checkpoint(newest)["step"] == TOTAL_STEPS


def test_a_failed_save_during_training_warns_and_training_goes_on(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_FAULTS", "save-fail@4,save-fail@5")
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "faults")
    assert result.code == 0, result.err
    assert "warning: checkpoint at step 4 failed" in result.err
    assert "the checkpoint of step 3 is intact" in result.err
    assert [e["step"] for e in events(tmp_path / "run", "checkpoint_failed")] == [4, 5]
    assert summary(tmp_path / "run")["steps"] == TOTAL_STEPS


def test_repeated_save_failures_stop_the_run_with_a_clear_message(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_FAULTS", "save-fail@4,save-fail@5,save-fail@6")
    run_dir = tmp_path / "run"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults")
    assert result.code == 1
    (line,) = error_lines(result.err)
    assert "step 6: 3 checkpoint saves in a row failed" in line
    assert "the checkpoint of step 3 is intact" in line
    assert checkpoint_steps(run_dir)[-1] == 3
    assert checkpoint_plugin.read_checkpoint(_newest(run_dir))["step"] == 3
    assert summary(run_dir)["stopped"] == "failed"


def test_rotation_keeps_the_newest_and_the_best(tiny):
    evals = [row for row in metrics(tiny.reference) if row.get("kind") == "eval"]
    best = max(evals, key=lambda row: (row["exact_accuracy"], -row["step"]))
    record = (tiny.reference / "checkpoints" / "best.json").read_text()
    assert f'"step": {best["step"]}' in record
    kept = {TOTAL_STEPS - 2, TOTAL_STEPS - 1, TOTAL_STEPS, best["step"]}
    assert checkpoint_steps(tiny.reference) == sorted(kept)


def test_sigint_finishes_the_step_checkpoints_and_exits_130_with_a_resume_command(
    tiny, tmp_path, cli, monkeypatch
):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("TRM_FAULTS", "sigint@4")
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults")
    assert result.code == 130, result.err
    assert "stopped after a checkpoint at step 4" in result.err
    assert summary(run_dir)["stopped"] == "interrupted"
    assert checkpoint_steps(run_dir)[-1] == 4
    command = result.err.split("resume with: ", 1)[1].splitlines()[0]
    words = shlex.split(command)
    assert words[:2] == ["trm", "run"] and str(run_dir) in words

    monkeypatch.delenv("TRM_FAULTS")
    result = cli(*words[1:])
    assert result.code == 0, result.err
    assert "resumed from step 4" in result.err
    assert (
        summary(run_dir)["final_weights_sha256"]
        == (summary(tiny.reference)["final_weights_sha256"])
    )
    assert train_steps(run_dir) == list(range(1, TOTAL_STEPS + 1))


def test_sigterm_stops_cleanly_too(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_FAULTS", "sigterm@7")
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "faults")
    assert result.code == 130
    assert summary(tmp_path / "run")["stopped"] == "terminated"
    assert checkpoint_steps(tmp_path / "run")[-1] == 7


def test_second_sigint_exits_at_once_without_waiting_for_a_checkpoint(
    tiny, tmp_path, cli, monkeypatch
):
    monkeypatch.setenv("TRM_FAULTS", "sigint@4,sigint@4")
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the tests run in the background
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "faults")
    assert result.code == 130
    assert "trm: stopped by the user" in result.err
    assert checkpoint_steps(tmp_path / "run")[-1] == 3
    assert signal.getsignal(signal.SIGINT) == before  # the run's handler is gone again


def test_non_finite_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(
    tiny, tmp_path, cli, monkeypatch
):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("TRM_FAULTS", "nan@6")
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults")
    assert result.code == 1
    (line,) = error_lines(result.err)
    assert "step 6: the loss is not finite" in line
    assert "the checkpoint of step 5 is intact" in line
    assert checkpoint_steps(run_dir)[-1] == 5
    payload = checkpoint_plugin.read_checkpoint(_newest(run_dir))
    assert all(torch.isfinite(t).all() for t in payload["model"].values())


def test_checkpoint_every_n_steps_from_the_command_line(tiny, tmp_path, cli):
    spec = write_spec(tmp_path, tiny.data, eval_interval=0, checkpoint_interval_steps=0)
    result = cli("run", spec, "--out", tmp_path / "run", "--checkpoint-every", "4")
    assert result.code == 0, result.err
    assert checkpoint_steps(tmp_path / "run") == [4, 8, 12]


def test_checkpoint_interval_parsing():
    assert parse_interval("500") == (500, 0.0)
    assert parse_interval("90s") == (0, 90.0)
    assert parse_interval("10m") == (0, 600.0)
    assert parse_interval("1.5h") == (0, 5400.0)
    for bad in ("0", "-3", "10 parsecs", "", "m"):
        with pytest.raises(TrmError, match="--checkpoint-every"):
            parse_interval(bad)


def test_time_based_interval_follows_the_measured_throughput():
    schedule = CheckpointSchedule(interval_steps=0, interval_s=600.0)
    assert not schedule.due(1, now_s=5.0)  # the first step (warm-up) only starts the clock
    due_at = [step for step in range(2, 400) if schedule.due(step, now_s=5.0 + 2.0 * (step - 1))]
    assert due_at[0] == 301  # 2 s a step: ~300 steps are ten minutes
    schedule.saved(301, now_s=605.0)
    later = [s for s in range(302, 900) if schedule.due(s, now_s=605.0 + 4.0 * (s - 301))]
    assert later[0] == 301 + 150  # slowed to 4 s a step: fewer steps per checkpoint


def test_checkpoint_size_estimate_bounds_the_real_file(tiny):
    payload = torch.load(_newest(tiny.reference), weights_only=True)
    estimate = estimate_checkpoint_bytes(
        load_spec(tiny.spec), DatasetShape.from_dict(payload["dataset_shape"])
    )
    actual = _newest(tiny.reference).stat().st_size
    assert actual <= estimate <= 3 * actual + 2 * 2**20


def test_preflight_refuses_a_run_directory_without_room_for_the_checkpoints(
    tiny, tmp_path, cli, monkeypatch
):
    monkeypatch.setattr(run_dir_module, "MIN_FREE_BYTES", 0)
    real = shutil.disk_usage
    monkeypatch.setattr(
        run_dir_module.shutil, "disk_usage", lambda p: real(p)._replace(free=50 * 2**10)
    )
    result = cli("run", tiny.spec, "--out", tmp_path / "run")
    assert result.code == 2
    (line,) = error_lines(result.err)
    assert "the run's checkpoints need about" in line and "(4 of ~" in line


def test_preflight_refuses_an_unwritable_run_directory(tiny, tmp_path, cli):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = cli("run", tiny.spec, "--out", blocker / "run")
    assert result.code == 2
    (line,) = error_lines(result.err)
    assert "is not writable" in line and "--out" in line


def test_a_run_directory_in_use_is_refused(tiny, tmp_path, cli):
    fcntl = pytest.importorskip("fcntl")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with (run_dir / ".lock").open("a+") as held:
        held.write("pid 4242\n")
        held.flush()
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        result = cli("run", tiny.spec, "--out", run_dir)
    assert result.code == 2
    (line,) = error_lines(result.err)
    assert "is in use by another trm run (pid 4242)" in line


def test_save_failure_errno_reaches_the_user(tmp_path):
    def no_space(handle):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        checkpoint_plugin.write_atomic(tmp_path / "x.pt", no_space)
    assert list(tmp_path.iterdir()) == []
