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
    assert_one_line_error(result, "the folder /nonexistent/dir does not exist")
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
    # the parent here (it starts the 2 worker processes and waits for them)
    done = cli("sweep", study, "--out", out, "--workers", "2", "--json")
    assert done.code == 0, done.err[-3000:]
    document = json.loads(done.out)
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
    resumed = cli("sweep", study, "--out", out)  # here: one worker, no process of its own
    assert resumed.code == 0, resumed.err[-3000:]
    # its claim was free: failed as cut off at once and queued again (Optuna's retry), the
    # retry resuming in the cut-off trial's own folder
    assert "resuming trial 2 (trial 1, cut off)" in resumed.err
    assert "starting trial 0" not in resumed.err
    after = _document(out)
    assert sorted(after) == [0, 1, 2] and after[1][0] == "FAIL" and after[2][0] == "COMPLETE"
    assert after[2][2] == str(second_trial)
    assert not (out / "trials" / "0002").exists()
    assert (out / "trials" / "0000" / "metrics.jsonl").read_text() == finished_log
    whole = tmp_path / "uninterrupted"
    finished = cli("sweep", study, "--out", out, "--json")
    command = json.loads(finished.out)["trials"][2]["command"].split()[1:]
    assert cli(*command, "--out", whole).code == 0
    assert summary(second_trial)["final_weights_sha256"] == summary(whole)["final_weights_sha256"]


def _trial_harness(tiny, tmp_path, monkeypatch, outcome, **study_options):
    """A real study (in tmp_path) whose trial's run is ``outcome(options)`` instead of
    training; returns the runner module, the study file, the study and its folder."""
    from trm.plugins.studies import runner
    from trm.plugins.studies.study_file import read_study_file

    study_file = read_study_file(_study(tmp_path, tiny.spec, **study_options))
    study, folder = runner.open_study(study_file, tmp_path, None)
    (tmp_path / "trials").mkdir(exist_ok=True)
    monkeypatch.setattr(runner, "run_training", lambda options, log: outcome(options))
    return runner, study_file, study, folder


def test_a_failing_trial_is_recorded_failed_with_its_line_and_the_study_goes_on(
    tiny, tmp_path, monkeypatch
):
    def fail(options):
        raise trm.TrainingFailed("loss is nan at step 3; the checkpoint of step 2 is intact")

    runner, study_file, study, folder = _trial_harness(tiny, tmp_path, monkeypatch, fail)
    runner._work(study, study_file, folder, 1, (), lambda line: None)
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

    runner, study_file, study, folder = _trial_harness(tiny, tmp_path, monkeypatch, interrupted)
    with pytest.raises(runner.StudyStopped, match="trial 0 stopped with its checkpoint"):
        runner._work(study, study_file, folder, 1, (), lambda line: None)
    assert [t.state.name for t in study.get_trials()][:2] == ["RUNNING", "WAITING"]


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def _created(tiny, tmp_path, name: str = "good", **options) -> tuple[Path, Path]:
    """A study folder holding study ``name`` (set up, no trial run) and its study file."""
    from trm.plugins.studies import runner
    from trm.plugins.studies.study_file import read_study_file

    path = _study(tmp_path / name, tiny.spec, **options)
    path = path.rename(path.with_name(f"{name}.toml"))
    out = tmp_path / f"{name}-out"
    out.mkdir()
    runner.open_study(read_study_file(path), out, None)
    return out, path


def test_a_folder_holding_another_study_is_refused_and_left_as_it_was(tiny, tmp_path, cli):
    out, _ = _created(tiny, tmp_path, "good")
    before = _files(out)
    other = _study(tmp_path / "other", tiny.spec)
    other = other.rename(other.with_name("other.toml"))
    result = cli("sweep", other, "--out", out)
    assert_one_line_error(result, "holds the study 'good', not 'other'")
    assert _files(out) == before
    with pytest.raises(trm.TrmError, match="holds the study 'good'"):
        trm.sweep(other, out=out)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"space": '"arch.H_cycles" = { grid = [1, 3] }'}, "space.arch.H_cycles"),
        ({"space": GRID + '\n"arch.hidden_size" = { grid = [16] }'}, "space.arch.hidden_size"),
        ({"metric": "eval.exact_accuracy"}, "objective.metric"),
        ({"direction": "minimize"}, "objective.direction"),
    ],
)
def test_a_changed_study_file_on_resume_is_refused_naming_the_change(
    tiny, tmp_path, cli, change, fragment
):
    out, path = _created(tiny, tmp_path, "study")
    before = _files(out)
    text = STUDY.format(
        spec=tiny.spec,
        trials=4,
        metric=change.get("metric", "best_exact_accuracy"),
        space=change.get("space", GRID),
    ).replace('direction = "maximize"', f'direction = "{change.get("direction", "maximize")}"')
    path.write_text(text)
    result = cli("sweep", path, "--out", out)
    assert_one_line_error(result, "was made from another study file", fragment)
    assert _files(out) == before
    import optuna

    from trm.plugins.studies.runner import storage_url

    study = optuna.load_study(study_name="study", storage=storage_url(out, None))
    assert [t.state.name for t in study.get_trials()] == ["WAITING"] * 4


def test_a_grid_of_ten_billion_points_with_one_trial_enqueues_one(tiny, tmp_path):
    from trm.plugins.studies import runner
    from trm.plugins.studies.study_file import read_study_file

    values = ", ".join(str(v) for v in range(1, 101))
    keys = ["train.seed", "train.lr_warmup_steps", "train.eval_interval",
            "train.checkpoint_interval_steps", "train.eval_max_examples"]  # fmt: skip
    space = "\n".join(f'"{key}" = {{ grid = [{values}] }}' for key in keys)
    path = _study(tmp_path, tiny.spec, space=space, trials=1)
    study_file = read_study_file(path)
    assert study_file.trials == 1
    (tmp_path / "out").mkdir()
    study, _ = runner.open_study(study_file, tmp_path / "out", None)
    assert [t.system_attrs["fixed_params"] for t in study.get_trials()] == [
        {key: 1 for key in keys}
    ]
    (tmp_path / "all.toml").write_text(path.read_text().replace("trials = 1\n", ""))
    with pytest.raises(trm.TrmError, match=r"study.trials is 10,000,000,000; a study runs at most"):
        read_study_file(tmp_path / "all.toml")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("../escaped", "is not a folder name"),
        ("a/b", "is not a folder name"),
        (".hidden", "is not a folder name"),
        ("x" * 300, "is 300 characters; give at most 100"),
    ],
)
def test_a_study_name_that_is_no_folder_name_is_refused(tiny, tmp_path, cli, name, fragment):
    path = _study(tmp_path, tiny.spec)
    path.write_text(path.read_text().replace("[study]\n", f'[study]\nname = "{name}"\n'))
    before = sorted(p.name for p in tmp_path.iterdir())
    result = cli("sweep", path)
    assert_one_line_error(result, fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("runs").exists() or name not in {p.name for p in Path("runs").iterdir()}


def test_a_plugin_key_the_plugin_does_not_take_is_refused_before_any_trial(tiny, tmp_path, cli):
    space = '"plugins.curriculum.no_such_option" = { grid = [1, 2] }'
    path = _study(tmp_path, tiny.spec, space=space)
    result = cli("sweep", path, "--out", tmp_path / "out")
    assert_one_line_error(result, "space.plugins.curriculum.no_such_option", "no_such_option")
    assert not (tmp_path / "out").exists()
    with pytest.raises(trm.TrmError, match=r"space\.plugins\.curriculum\.no_such_option"):
        trm.sweep(path, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _bad_database(tmp_path: Path, kind: str) -> Path:
    """A study.db that is a folder, a text file, or an SQLite header over garbage."""
    folder = tmp_path / kind
    folder.mkdir()
    db = folder / "study.db"
    if kind == "folder":
        db.mkdir()
    elif kind == "text":
        db.write_text("not a database\n")
    else:
        db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 40)
    return folder


@pytest.mark.parametrize("kind", ["folder", "text", "damaged"])
def test_a_bad_study_database_is_one_line_for_sweep_report_and_storage(tiny, tmp_path, cli, kind):
    folder = _bad_database(tmp_path, kind)
    study = _study(tmp_path / "file", tiny.spec)
    before = _files(folder)
    for args in (
        ("sweep", study, "--out", folder),
        ("report", folder),
        ("sweep", study, "--out", tmp_path / "new", "--storage", f"sqlite:///{folder}/study.db"),
    ):
        result = cli(*args)
        assert_one_line_error(result, "study.db")
        assert "Background on this error" not in result.err
        assert _files(folder) == before
        assert not (tmp_path / "new").exists()
        assert not (folder / "report").exists()
    with pytest.raises(trm.TrmError, match=r"study\.db"):
        trm.sweep(study, out=folder)
    assert _files(folder) == before


def test_a_storage_in_a_missing_folder_is_one_line(tiny, tmp_path, cli):
    study = _study(tmp_path, tiny.spec)
    url = f"sqlite:///{tmp_path}/missing/study.db"
    result = cli("sweep", study, "--out", tmp_path / "out", "--storage", url)
    assert_one_line_error(result, "does not exist")
    assert not (tmp_path / "out").exists() and not (tmp_path / "missing").exists()


def test_report_on_an_empty_study_database_refuses_and_writes_nothing(tmp_path, cli):
    (tmp_path / "study.db").write_bytes(b"")
    result = cli("report", tmp_path)
    assert_one_line_error(result, "is empty: it holds no study")
    assert (tmp_path / "study.db").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db"]


def test_database_errors_lose_sqlalchemys_background_line():
    from trm.plugins.studies.runner import database_error

    error = Exception(
        "(sqlite3.DatabaseError) file is not a database\n"
        "(Background on this error at: https://sqlalche.me/e/20/4xp6)"
    )
    assert database_error(error) == "(sqlite3.DatabaseError) file is not a database"


def test_postgres_urls_name_psycopg_3_and_hide_the_password():
    from trm.plugins.studies.runner import shown_url, storage_url

    url = storage_url(Path("x"), "postgresql://trm:secret@db.example/studies")
    assert url == "postgresql+psycopg://trm:secret@db.example/studies"
    assert storage_url(Path("x"), "postgres://h/db") == "postgresql+psycopg://h/db"
    assert storage_url(Path("x"), "postgresql+psycopg2://h/db") == "postgresql+psycopg2://h/db"
    assert shown_url(url) == "postgresql+psycopg://trm:***@db.example/studies"


def _completed(options):
    from trm.api.run import Run, RunSummary

    document = {"stopped": "finished", "steps": 12, "samples": 96, "wall_s": 1.0}
    document["best_exact_accuracy"] = 0.5
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "metrics.jsonl").write_text("")
    return Run(path=options.out, summary=RunSummary.from_document(document))


def test_a_trial_another_worker_took_over_is_not_told_twice_and_the_worker_goes_on(
    tiny, tmp_path, monkeypatch
):
    from optuna.trial import TrialState

    holder = {}

    def taken_over_meanwhile(options):
        study = holder["study"]
        trial = next(t for t in study.get_trials() if t.state == TrialState.RUNNING)
        if trial.number == 0:  # another worker failed it as cut off (its heartbeat lapsed)
            study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        return _completed(options)

    runner, study_file, study, folder = _trial_harness(
        tiny, tmp_path, monkeypatch, taken_over_meanwhile
    )
    holder["study"] = study
    lines: list[str] = []
    runner._work(study, study_file, folder, 1, (), lines.append)
    states = [t.state.name for t in study.get_trials()]
    assert states == ["FAIL", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert any("trial 0 was taken over by another worker" in line for line in lines)


def test_a_worker_of_another_folder_leaves_a_trial_with_a_live_heartbeat_alone(tiny, tmp_path):
    from optuna.trial import TrialState

    from trm.plugins.studies import runner
    from trm.plugins.studies.study_file import read_study_file

    space = '"train.lr" = { low = 1e-4, high = 1e-2, log = true }'
    study_file = read_study_file(_study(tmp_path, tiny.spec, space=space, trials=2))
    shared = f"sqlite:///{tmp_path}/shared.db"
    first, second = tmp_path / "machine-a", tmp_path / "machine-b"
    for out in (first, second):
        out.mkdir()
        (out / "trials").mkdir()
    study_a, folder_a = runner.open_study(study_file, first, shared)
    claimed = runner._claim(study_a, study_file, folder_a, new_trials=True)
    assert claimed.trial.number == 0
    study_b, folder_b = runner.open_study(study_file, second, shared)
    taken = runner._claim(study_b, study_file, folder_b, new_trials=True)
    assert taken.trial.number == 1 and not taken.resumed  # a new trial, not machine A's
    assert runner._claim(study_b, study_file, folder_b, new_trials=True) == runner.WAIT
    states = {t.number: t.state for t in study_b.get_trials()}
    assert states == {0: TrialState.RUNNING, 1: TrialState.RUNNING}
    claimed.claim.close()
    taken.claim.close()


def test_workers_sharing_a_study_draw_different_start_up_trials_reproducibly(tiny, tmp_path):
    from trm.plugins.studies import runner
    from trm.plugins.studies.study_file import read_study_file

    space = '"train.lr" = { low = 1e-4, high = 1e-2, log = true }'
    study_file = read_study_file(_study(tmp_path, tiny.spec, space=space, trials=4))

    def first_params(out: Path, storage: str | None, workers: int) -> list[float]:
        out.mkdir()
        (out / "trials").mkdir()
        drawn, claims = [], []
        for _ in range(workers):  # each worker its own process: its own study and sampler
            study, folder = runner.open_study(study_file, out, storage)
            claimed = runner._claim(study, study_file, folder, new_trials=True)
            claims.append(claimed.claim)  # held: the worker runs it
            study.sampler = runner._sampler(study_file, claimed.trial.number)
            drawn.append(study_file.parameters[0].suggest(claimed.trial))
        for claim in claims:
            claim.close()
        return drawn

    two = first_params(tmp_path / "two", None, 2)
    assert two[0] != two[1]
    assert first_params(tmp_path / "again", None, 2) == two
    assert runner.trial_seed(0, 0) != runner.trial_seed(0, 1)
    assert runner.trial_seed(0, 1) != runner.trial_seed(1, 1)


def test_a_study_resumed_after_its_time_budget_finishes_the_cut_off_trial(
    tiny, tmp_path, monkeypatch
):
    from trm.file_lock import hold_lock

    runner, study_file, study, folder = _trial_harness(
        tiny, tmp_path, monkeypatch, _completed, trials=4
    )
    path = study_file.path
    path.write_text(path.read_text().replace("seed = 0\n", "seed = 0\ntime_budget_s = 5\n"))
    from trm.plugins.studies.study_file import read_study_file

    study_file = read_study_file(path)
    claimed = runner._claim(study, study_file, folder, new_trials=True)
    claimed.run_dir.mkdir()
    claimed.claim.close()  # its worker died
    study.set_user_attr("started_at", 0.0)  # the budget was spent long ago
    lines: list[str] = []
    runner._work(study, study_file, folder, 1, (), lines.append)
    states = [t.state.name for t in study.get_trials()]
    assert states == ["FAIL", "WAITING", "WAITING", "WAITING", "COMPLETE"]
    from trm.plugins.studies.results import read_study_result

    rows = read_study_result(study, tmp_path).trials
    assert rows[0].error == "cut off; run again as trial 4"
    assert any("resuming trial 4 (trial 0, cut off)" in line for line in lines)
    assert hold_lock(claimed.run_dir.with_suffix(".claim")) is not None


def test_trials_plan_their_threads_from_the_backend_not_a_fixed_count(tiny, tmp_path):
    from trm.plugins.studies.runner import trial_overrides
    from trm.plugins.studies.study_file import read_study_file

    study_file = read_study_file(_study(tmp_path, tiny.spec))
    overrides = trial_overrides(study_file, {"arch.H_cycles": 1})
    assert not any(text.startswith("runtime.threads") for text in overrides)


def test_one_lock_helper_is_free_again_when_its_holder_is_killed(tmp_path):
    from trm.file_lock import hold_lock, lock_holder

    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from trm.file_lock import hold_lock; "
         f"held = hold_lock(Path({str(path)!r})); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    assert hold_lock(path) is None
    assert lock_holder(path) == f"pid {holder.pid}"
    holder.kill()
    holder.wait()
    held = hold_lock(path)
    assert held is not None and lock_holder(path) == f"pid {os.getpid()}"
    held.close()


@pytest.mark.slow
def test_sigterm_to_a_parent_of_workers_stops_them_with_their_checkpoints(tiny, tmp_path):
    import psutil

    spec = write_spec(tmp_path / "spec", tiny.base / "data", eval_interval=4, max_steps=400)
    study = _study(tmp_path, spec, space='"arch.L_cycles" = { grid = [1, 2] }', trials=2)
    out = tmp_path / "out"
    parent = _sweep(study, "--out", out, "--workers", "2", wait=False)
    runs = [out / "trials" / "0000", out / "trials" / "0001"]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not all(
        (run / "checkpoints").is_dir() and checkpoint_steps(run) for run in runs
    ):
        assert parent.poll() is None, parent.communicate()[1][-3000:]
        time.sleep(0.2)
    workers = psutil.Process(parent.pid).children()
    assert len(workers) == 2
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=300)
    assert parent.returncode == 130, err[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive  # no worker goes on training
    trials = _document(out)
    assert [trials[n][0] for n in (0, 1)] == ["RUNNING", "RUNNING"]  # resumed by the next sweep
    for run in runs:
        assert json.loads((run / "summary.json").read_text())["stopped"] == "terminated"


def test_the_documented_postgres_install_gives_the_driver_sqlalchemy_loads_for_the_url():
    import tomllib

    from trm.plugins.studies.runner import storage_url

    root = Path(__file__).resolve().parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(name.startswith("psycopg[binary]") for name in extras["postgres"])
    assert any(name.startswith("psycopg[binary]") for name in extras["test"])
    assert "pip install -e '.[postgres]'" in (root / "docs" / "sweeps.md").read_text()
    pytest.importorskip("psycopg")
    from sqlalchemy.engine import make_url

    url = make_url(storage_url(Path(), "postgresql://user:secret@db.example/studies"))
    assert url.get_dialect().driver == "psycopg"
    url.get_dialect().import_dbapi()  # what fails as "Failed to import DB access module"


def test_sweep_json_prints_the_document_alone_on_stdout(tiny, tmp_path, cli, monkeypatch):
    from trm.plugins.studies import runner

    def training_that_shows_progress(options, log):
        print("step 1/12  55 samples/s  loss 1.8867")  # what the progress plugin prints
        return _completed(options)

    monkeypatch.setattr(runner, "run_training", training_that_shows_progress)
    result = cli("sweep", _study(tmp_path, tiny.spec), "--out", tmp_path / "out", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["counts"] == {"complete": 4}
    assert "step 1/12" in result.err


def test_the_pruning_plugin_stops_a_trial_the_storage_finished_meanwhile():
    import optuna

    from trm.control import TrainControl
    from trm.plugins.studies.plugins import TAKEN_OVER, TrialPruning

    class FinishedTrial:
        number = 3

        def report(self, value: float, step: int) -> None:
            raise optuna.exceptions.UpdateFinishedTrialError("trial 3 is already finished")

    control = TrainControl()
    TrialPruning(FinishedTrial(), "exact_accuracy").on_eval(
        SimpleNamespace(step=10), {"exact_accuracy": 0.5}, control
    )
    assert control.stop_reason == TAKEN_OVER
    assert "trial 3 was failed as cut off" in control.messages[-1]
