"""The opt-in ``tensorboard`` and ``wandb`` plugins: what a run logs, read back with each
tool's own reader; a resumed run continues the same TensorBoard folder and W&B run; W&B
offline needs no network, an unreachable service does not stop the run; a missing package is
one line naming the extra to install."""

from __future__ import annotations

import io
import json
import os
import re
import struct
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import assert_one_line_error
from tests.tiny_run import EVAL_INTERVAL, TOTAL_STEPS, build_tiny_data, metrics, write_spec

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)
from wandb.proto import wandb_internal_pb2

HALF = TOTAL_STEPS // 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("loggers")
    data = build_tiny_data(base / "data")
    return SimpleNamespace(base=base, spec=write_spec(base, data, checkpoint_interval_steps=3))


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    """W&B offline, quiet, with its settings and caches in the test's folder."""
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    return monkeypatch


def _train_rows(run_dir: Path) -> list[dict]:
    return [r for r in metrics(run_dir) if "kind" not in r]


# ------------------------------------------------------------------ TensorBoard


def _scalars(run_dir: Path) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return events


def test_tensorboard_holds_every_row_as_scalars_read_back_by_its_own_reader(tiny, cli):
    run_dir = tiny.base / "tb"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "tensorboard")
    assert result.code == 0, result.err
    events = _scalars(run_dir)
    tags = events.Tags()["scalars"]
    assert {"train/loss", "train/lr", "train/samples_per_s", "eval/exact_accuracy"} <= set(tags)
    assert {"eval/loss", "eval/q_halt_accuracy", "events/checkpoint"} <= set(tags)
    loss = events.Scalars("train/loss")
    rows = _train_rows(run_dir)
    assert [e.step for e in loss] == [r["step"] for r in rows] == list(range(1, TOTAL_STEPS + 1))
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in rows], rel=1e-6)
    evals = [r for r in metrics(run_dir) if r.get("kind") == "eval"]
    exact = events.Scalars("eval/exact_accuracy")
    assert [e.step for e in exact] == [r["step"] for r in evals]
    assert [e.step for e in exact] == [EVAL_INTERVAL, 2 * EVAL_INTERVAL, TOTAL_STEPS]
    assert "spec/text_summary" in events.Tags()["tensors"]
    assert "hardware/text_summary" in events.Tags()["tensors"]


def test_a_resumed_run_continues_the_same_tensorboard_folder(tiny, cli):
    run_dir = tiny.base / "tb-resumed"
    first = cli("run", tiny.spec, "--out", run_dir, "--plugins", "tensorboard", "--max-steps", HALF)
    assert first.code == 0, first.err
    second = cli("run", tiny.spec, "--out", run_dir, "--plugins", "tensorboard")
    assert second.code == 0, second.err
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 2
    steps = [e.step for e in _scalars(run_dir).Scalars("train/loss")]
    assert steps == list(range(1, TOTAL_STEPS + 1))  # each step once, in one run


# ------------------------------------------------------------------ W&B


def _wandb_records(path: Path) -> list:
    """The protobuf records of a .wandb file (W&B's LevelDB-style log: a 7-byte header,
    then 32 KiB blocks of chunks, each with a 4-byte checksum, a 2-byte length, a type)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def _history(run_folder: Path) -> tuple[dict[int, dict[str, str]], list]:
    """(logged values by step, run records) of one offline W&B run folder."""
    (log,) = run_folder.glob("run-*.wandb")
    history: dict[int, dict[str, str]] = {}
    runs = []
    for record in _wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            runs.append(record.run)
        elif kind == "history":
            items = {
                item.key or "/".join(item.nested_key): item.value_json
                for item in record.history.item
            }
            history.setdefault(int(items["_step"]), {}).update(items)
    return history, runs


def test_a_read_only_tensorboard_folder_is_one_warning_and_no_traceback(tiny, cli, monkeypatch):
    """Root writes anywhere, so the read-only folder is a write that fails as on one (the
    event writer's background thread meets it first)."""
    run_dir = tiny.base / "tb-read-only"
    folder = os.fsdecode(run_dir / "tensorboard")
    real_open = io.open

    def read_only(file, mode="r", *args, **kwargs):
        name = os.fsdecode(file) if isinstance(file, (str, bytes, os.PathLike)) else ""
        if name.startswith(folder) and any(flag in mode for flag in "wax+"):
            raise OSError(30, "Read-only file system", name)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", read_only)
    unhandled = []  # what a thread would print as a traceback (pytest's own hook hides it)
    monkeypatch.setattr(threading, "excepthook", unhandled.append)
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "tensorboard")
    assert result.code == 0, result.err
    assert "Traceback" not in result.err, result.err
    assert not unhandled, [str(args.exc_value) for args in unhandled]
    warnings = [line for line in result.err.splitlines() if line.startswith("trm: warning")]
    assert len(warnings) == 1, result.err
    assert "warning: tensorboard: cannot write" in warnings[0]
    assert "Read-only file system" in warnings[0]
    assert [r["step"] for r in _train_rows(run_dir)] == list(range(1, TOTAL_STEPS + 1))


def test_wandb_offline_logs_rows_spec_and_hardware_and_resume_keeps_the_run(tiny, cli, wandb_env):
    run_dir = tiny.base / "wb"
    first = cli("run", tiny.spec, "--out", run_dir, "--plugins", "wandb", "--max-steps", HALF)
    assert first.code == 0, first.err
    run_id = (run_dir / "wandb-run-id").read_text().strip()
    second = cli("run", tiny.spec, "--out", run_dir, "--plugins", "wandb")
    assert second.code == 0, second.err
    assert (run_dir / "wandb-run-id").read_text().strip() == run_id
    folders = sorted((run_dir / "wandb").glob("offline-run-*"))
    # wandb names a folder offline-run-<second>-<run id>, and adds "-1" when both runs
    # start within the same second; either way both folders belong to the one run id.
    same_run = re.compile(rf"offline-run-\d{{8}}_\d{{6}}-{run_id}(-\d+)?")
    assert len(folders) == 2 and all(same_run.fullmatch(f.name) for f in folders)

    history, runs = _history(folders[0])
    assert sorted(history) == list(range(1, HALF + 1))
    assert runs[0].display_name == "wb" and runs[0].run_id == run_id
    config = {item.key: item.value_json for item in runs[0].config.update}
    assert json.loads(config["spec"])["arch"]["hidden_size"] == 16
    assert "cpu_model" in json.loads(config["hardware"])
    later, _ = _history(folders[1])
    assert sorted(later) == list(range(HALF + 1, TOTAL_STEPS + 1))
    rows = {r["step"]: r for r in _train_rows(run_dir)}
    for step, items in {**history, **later}.items():
        assert float(items["train/loss"]) == pytest.approx(rows[step]["loss"])
    assert "eval/exact_accuracy" in later[TOTAL_STEPS] and "eval/loss" in later[TOTAL_STEPS]
    assert "events/checkpoint" in later[TOTAL_STEPS]


def test_an_unreachable_wandb_service_does_not_stop_the_run(tiny, cli, wandb_env):
    wandb_env.delenv("WANDB_MODE")
    wandb_env.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    wandb_env.setenv("WANDB_API_KEY", "0" * 40)
    wandb_env.setenv("WANDB_INIT_TIMEOUT", "3")
    run_dir = tiny.base / "wb-unreachable"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "wandb")
    assert result.code == 0, result.err
    assert [r["step"] for r in _train_rows(run_dir)] == list(range(1, TOTAL_STEPS + 1))
    assert "wandb: cannot log online" in result.err and "wandb sync" in result.err
    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    history, _ = _history(folder)
    assert sorted(history) == list(range(1, TOTAL_STEPS + 1))


# ------------------------------------------------------------------ missing packages


@pytest.mark.parametrize("plugin, package", [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_a_missing_package_is_one_line_naming_the_extra(
    tiny, cli, monkeypatch, tmp_path, plugin, package
):
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", plugin)
    assert_one_line_error(result, f"pip install 'trm[{plugin}]'")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
