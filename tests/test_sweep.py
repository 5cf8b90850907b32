"""`trm sweep`: studies of many runs on Optuna — the study file's checks, trials as ordinary
runs shared by worker processes without running one twice, resume after SIGKILL with the
cut-off trial bit-identical, pruning through the trial's plugin, and the study's report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import trm
from tests.conftest import assert_one_line_error
from tests.tiny_run import build_tiny_data, checkpoint_steps, summary, write_spec

pytest.importorskip("optuna")

STUDY = """\
[study]
spec = "{spec}"
trials = {trials}
seed = 0

[objective]
metric = "{metric}"
direction = "maximize"

[pruner]
kind = "none"

[space]
{space}
"""
GRID = '"arch.H_cycles" = { grid = [1, 2] }\n"arch.L_cycles" = { grid = [1, 2] }'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("sweep")
    data = build_tiny_data(base / "data")
    return SimpleNamespace(base=base, spec=write_spec(base, data, eval_interval=4))


def _study(
    folder: Path,
    spec: Path,
    space: str = GRID,
    trials: int = 4,
    metric: str = "best_exact_accuracy",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "study.toml"
    path.write_text(STUDY.format(spec=spec, trials=trials, metric=metric, space=space))
    return path


def _sweep(*args: str | Path, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [sys.executable, "-m", "trm", "sweep", *map(str, args)]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def _document(out: Path) -> dict:
    import optuna

    study = optuna.load_study(study_name="study", storage=f"sqlite:///{out / 'study.db'}")
    return {
        t.number: (t.state.name, t.params, t.user_attrs.get("run_dir")) for t in study.get_trials()
    }


@pytest.mark.parametrize(
    ("space", "metric", "fragment"),
    [
        ('"arch.no_such_key" = { grid = [1, 2] }', "best_exact_accuracy", "space.arch.no_such_key"),
        ("", "best_exact_accuracy", "the search space is empty"),
        (GRID, "eval.nothing_writes_this", "is no number a run writes"),
        ('"arch.H_cycles" = { grid = [1, 1] }', "best_exact_accuracy", "repeats a value"),
        (
            '"train.lr" = { low = 1e-3, high = 1e-4 }',
            "best_exact_accuracy",
            "low must be below high",
        ),
        ('"train.lr" = { low = -1.0, high = 1e-3 }', "best_exact_accuracy", "space.train.lr"),
        ('"arch.H_cycles" = { grid = ["two"] }', "best_exact_accuracy", "space.arch.H_cycles"),
    ],
)
def test_a_bad_study_file_is_one_line_before_any_trial(
    tiny, tmp_path, cli, space, metric, fragment
):
    study = _study(tmp_path, tiny.spec, space=space, metric=metric)
    result = cli("sweep", study, "--out", tmp_path / "out")
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "out").exists()


def test_a_storage_that_cannot_be_opened_is_one_line_and_leaves_nothing(tiny, tmp_path, cli):
    study = _study(tmp_path, tiny.spec)
    result = cli(
        "sweep", study, "--out", tmp_path / "out", "--storage", "sqlite:////nonexistent/dir/x.db"
    )
    assert_one_line_error(result, "cannot be opened")
    assert not (tmp_path / "out").exists()
    with pytest.raises(trm.TrmError, match=r"^workers must be"):
        trm.sweep(study, out=tmp_path / "out", workers=0)
    with pytest.raises(trm.TrmError, match=r"^storage must be"):
        trm.sweep(study, out=tmp_path / "out", storage="nowhere")


def test_the_pruning_plugin_reports_each_evaluation_and_stops_a_hopeless_trial():
    from trm.control import TrainControl
    from trm.plugins.studies.plugins import PRUNED, TrialPruning

    class FakeTrial:
        number = 7

        def __init__(self, prune_at: int) -> None:
            self.reported: list[tuple[float, int]] = []
            self.prune_at = prune_at

        def report(self, value: float, step: int) -> None:
            self.reported.append((value, step))

        def should_prune(self) -> bool:
            return self.reported[-1][1] >= self.prune_at

    trial = FakeTrial(prune_at=20)
    plugin = TrialPruning(trial, "exact_accuracy")
    control = TrainControl()
    plugin.on_eval(SimpleNamespace(step=10), {"exact_accuracy": 0.5}, control)
    assert trial.reported == [(0.5, 10)] and control.stop_reason is None
    plugin.on_eval(SimpleNamespace(step=20), {"exact_accuracy": 0.25}, control)
    assert control.stop_reason == PRUNED and "trial 7 pruned at step 20" in control.messages[-1]


@pytest.mark.slow
def test_two_workers_run_every_grid_point_once_and_the_best_trains_again_exactly(
    tiny, tmp_path, cli
):
    study = _study(tmp_path, tiny.spec)
    out = tmp_path / "out"
    done = _sweep(study, "--out", out, "--workers", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["counts"] == {"complete": 4}
    points = sorted(
        (t["params"]["arch.H_cycles"], t["params"]["arch.L_cycles"]) for t in document["trials"]
    )
    assert points == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for trial in document["trials"]:  # each trained once, in its own folder
        assert summary(Path(trial["run_dir"]))["steps"] == 12
    best = document["best"]
    again = tmp_path / "again"
    command = [*best["command"].split()[1:], "--out", str(again)]
    assert cli(*command).code == 0
    trained = summary(Path(best["run_dir"]))
    assert summary(again)["final_weights_sha256"] == trained["final_weights_sha256"]
    report = cli("report", out, "--json")
    assert report.code == 0, report.err
    page = json.loads(report.out)
    assert {"objective-arch-H_cycles.png", "objective-arch-L_cycles.png"} <= set(page["plots"])
    assert (out / "report" / "index.html").read_text().count("<tr>") == 5
    assert (out / "report" / "best" / "index.html").is_file()


@pytest.mark.slow
def test_two_sweeps_on_one_folder_share_the_study_without_running_a_trial_twice(tiny, tmp_path):
    space = '"train.lr" = { low = 1e-4, high = 1e-2, log = true }'
    study = _study(tmp_path, tiny.spec, space=space, trials=3)
    out = tmp_path / "out"
    first, second = (_sweep(study, "--out", out, wait=False) for _ in range(2))
    for process in (first, second):
        _, err = process.communicate(timeout=900)
        assert process.returncode == 0, err[-3000:]
    trials = _document(out)
    assert sorted(trials) == [0, 1, 2]
    assert all(state == "COMPLETE" for state, _, _ in trials.values())
    for _, _, run_dir in trials.values():  # trained once: one row per step, no repeats
        rows = [
            json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
        ]
        assert [r["step"] for r in rows if "kind" not in r] == list(range(1, 13))


@pytest.mark.slow
def test_a_killed_sweep_resumes_the_cut_off_trial_bit_identical_and_reruns_no_finished_one(
    tiny, tmp_path, cli
):
    spec = write_spec(tmp_path / "spec", tiny.base / "data", eval_interval=4, max_steps=40)
    study = _study(tmp_path, spec, space='"arch.L_cycles" = { grid = [1, 2] }', trials=2)
    out = tmp_path / "out"
    process = _sweep(study, "--out", out, wait=False)
    second_trial = out / "trials" / "0001"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (
        (second_trial / "checkpoints").is_dir()
        and len(checkpoint_steps(second_trial)) >= 2
        and max(checkpoint_steps(second_trial)) >= 5
    ):
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = _document(out)
    assert before[0][0] == "COMPLETE" and before[1][0] == "RUNNING"
    finished_log = (out / "trials" / "0000" / "metrics.jsonl").read_text()
    resumed = _sweep(study, "--out", out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming trial 1" in resumed.stderr and "starting trial 0" not in resumed.stderr
    after = _document(out)
    assert sorted(after) == [0, 1] and after[1][0] == "COMPLETE"
    assert (out / "trials" / "0000" / "metrics.jsonl").read_text() == finished_log
    whole = tmp_path / "uninterrupted"
    command = [
        *json.loads(_sweep(study, "--out", out, "--json").stdout)["trials"][1]["command"].split()[
            1:
        ]
    ]
    assert cli(*command, "--out", whole).code == 0
    assert summary(second_trial)["final_weights_sha256"] == summary(whole)["final_weights_sha256"]


def _trial_harness(tiny, tmp_path, monkeypatch, outcome):
    """A real study (in tmp_path) whose trial's run is ``outcome(options)`` instead of training."""
    from trm.plugins.studies import runner
    from trm.plugins.studies.study_file import read_study_file

    study_file = read_study_file(_study(tmp_path, tiny.spec))
    study = runner.open_study(study_file, tmp_path, None)
    monkeypatch.setattr(runner, "run_training", lambda options, log: outcome(options))
    return runner, study_file, study


def test_a_failing_trial_is_recorded_failed_with_its_line_and_the_study_goes_on(
    tiny, tmp_path, monkeypatch
):
    def fail(options):
        raise trm.TrainingFailed("loss is nan at step 3; the checkpoint of step 2 is intact")

    runner, study_file, study = _trial_harness(tiny, tmp_path, monkeypatch, fail)
    (tmp_path / "trials").mkdir()
    runner._work(study, study_file, tmp_path, 1, (), lambda line: None)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL"] * 4  # every point tried, none stopped it
    assert trials[0].user_attrs["error"].startswith("loss is nan at step 3")


def test_a_trial_stopped_by_a_signal_keeps_running_state_for_the_next_sweep(
    tiny, tmp_path, monkeypatch
):
    from trm.api.run import Run, RunSummary

    def interrupted(options):
        document = {"stopped": "interrupted", "steps": 5, "samples": 40, "wall_s": 1.0}
        return Run(path=options.out, summary=RunSummary.from_document(document))

    runner, study_file, study = _trial_harness(tiny, tmp_path, monkeypatch, interrupted)
    (tmp_path / "trials").mkdir()
    with pytest.raises(runner.StudyStopped, match="trial 0 stopped with its checkpoint"):
        runner._work(study, study_file, tmp_path, 1, (), lambda line: None)
    assert [t.state.name for t in study.get_trials()][:2] == ["RUNNING", "WAITING"]
