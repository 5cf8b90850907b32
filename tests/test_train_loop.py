"""The loop's contracts: the reference's learning-rate count, per-run plugin state, on_train_end
for every ending, and which detect_hardware answer wins."""

from __future__ import annotations

import types

import pytest

import trm.api.training as run_cmd  # where `trm run` loads its plugins
from tests.tiny_run import build_tiny_data, metrics, summary, write_spec
from trm import hookimpl
from trm.hardware import HardwareProfile
from trm.plan import pipeline
from trm.plugin_manager import load_plugins


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build_tiny_data(tmp_path_factory.mktemp("loop") / "data")


def test_the_first_update_uses_the_learning_rate_of_update_one_as_the_reference(
    data, tmp_path, cli
):
    """The reference increments its step before computing the rate, so update k uses
    lr(k): with warmup 2 the first update trains at lr/2, never at 0."""
    spec = write_spec(tmp_path, data, max_steps=3, lr_warmup_steps=2)
    assert cli("run", spec, "--out", tmp_path / "run").code == 0
    rates = [row["lr"] for row in metrics(tmp_path / "run") if "kind" not in row]
    assert rates[:2] == pytest.approx([1e-3 / 2, 1e-3])


def _recording(monkeypatch) -> list:
    """The plugin manager each `trm run` trains with (the one built with the spec's plugin
    tables; an earlier one only names the backends' process groups), in order."""
    managers = []
    real = run_cmd.load_plugins

    def load(names, **kw):
        pm = real(names, **kw)
        if "spec_tables" in kw:
            managers.append(pm)
        return pm

    monkeypatch.setattr(run_cmd, "load_plugins", load)
    return managers


def test_two_runs_in_one_process_share_no_plugin_state(data, tmp_path, cli, monkeypatch):
    managers = _recording(monkeypatch)
    spec = write_spec(tmp_path, data, max_steps=4)
    monkeypatch.setenv("TRM_FAULTS", "oom@2")
    halving = ("--set", "runtime.activation_checkpointing=off")  # memory-guard halves at once
    first = cli("run", spec, "--out", tmp_path / "a", "--plugins", "faults,thermal", *halving)
    monkeypatch.delenv("TRM_FAULTS")
    second = cli("run", spec, "--out", tmp_path / "b", "--plugins", "faults,thermal")
    assert first.code == 0 and second.code == 0, first.err + second.err
    for name in ("cpu", "memory-guard", "progress", "faults", "thermal"):
        a, b = (pm.pm.get_plugin(name) for pm in managers)
        assert a is not b and type(a) is type(b), name
    guard_a, guard_b = (pm.pm.get_plugin("memory-guard") for pm in managers)
    assert guard_a.failures == {4: 1} and guard_a.shrunk_from == [4]
    assert guard_b.failures == {} and guard_b.shrunk_from == []
    assert summary(tmp_path / "b")["micro_batch_size"] == 4


def test_on_train_end_runs_when_the_loop_raises(data, tmp_path, cli, monkeypatch):
    ended = []
    plugin = types.SimpleNamespace()

    @hookimpl
    def on_step(state):
        if state.step == 2:
            raise RuntimeError("a plugin bug")

    @hookimpl
    def on_train_end(summary):
        ended.append(summary)

    plugin.on_step, plugin.on_train_end = on_step, on_train_end
    real = run_cmd.load_plugins
    monkeypatch.setattr(
        run_cmd,
        "load_plugins",
        lambda names, extra_modules=(), **kw: real(
            names, extra_modules=[*extra_modules, ("buggy", plugin)], **kw
        ),
    )
    result = cli("run", write_spec(tmp_path, data), "--out", tmp_path / "run")
    assert result.code == 1
    assert [s["stopped"] for s in ended] == ["failed"]
    assert ended[0]["error"] == "a plugin bug" and ended[0]["steps"] == 2
    assert summary(tmp_path / "run")["stopped"] == "failed"


def test_a_specific_plugins_hardware_facts_override_the_generic_system_plugin():
    """``system`` is trylast: pluggy calls it after every other detect_hardware, and the
    first known value of a field wins, so a backend or third party speaks for its device."""
    vendor = types.SimpleNamespace()

    @hookimpl
    def detect_hardware():
        return HardwareProfile(cpu_model="Vendor X-1", unified_memory=True)

    vendor.detect_hardware = detect_hardware
    generic = pipeline.detect_hardware(load_plugins())
    merged = pipeline.detect_hardware(load_plugins(extra_modules=[("vendor", vendor)]))
    assert generic.cpu_model != "Vendor X-1"
    assert merged.cpu_model == "Vendor X-1" and merged.unified_memory is True
    assert merged.memory_total_bytes == generic.memory_total_bytes  # only system knows it


def test_a_sources_task_metrics_reach_eval_rows_and_trm_eval(data, tmp_path, cli, monkeypatch):
    """A data source's optional ``task_metrics`` is averaged over the evaluated examples and
    reported beside exact and cell accuracy (the maze's path rates use this)."""
    import json

    import numpy as np

    from trm.plugins.tasks.sudoku.source import SudokuSource

    def task_metrics(self, inputs, labels, predictions):
        return {"first_cell_rate": (predictions[:, 0] == labels[:, 0]).astype(np.float64)}

    monkeypatch.setattr(SudokuSource, "task_metrics", task_metrics, raising=False)
    run_dir = tmp_path / "run"
    assert cli("run", write_spec(tmp_path, data, max_steps=5), "--out", run_dir).code == 0
    evals = [r for r in metrics(run_dir) if r.get("kind") == "eval"]
    assert evals and all(0.0 <= r["first_cell_rate"] <= 1.0 for r in evals)
    result = cli("eval", run_dir, "--json")
    assert result.code == 0, result.err
    assert 0.0 <= json.loads(result.out)["first_cell_rate"] <= 1.0
    assert "first cell rate" in cli("eval", run_dir).out
