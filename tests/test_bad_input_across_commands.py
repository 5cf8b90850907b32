"""Bad input across the commands (data build, run, eval, solve, report, the loggers, the
contrib tables, torchrun), and ends that must stay quiet.

Bad input is one ``trm: error:`` line, exit 2, no traceback, nothing written or changed
(the cases that must leave a folder or run untouched compare it before and after); a closed
pipe ends quietly; torchrun's ranks print an error once and agree on ``--max-steps``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import assert_one_line_error, error_lines
from tests.test_arc_eval import _prize_files, _scored_arc_plugins, _task, arc_data, arc_run
from tests.tiny_run import build_tiny_data, summary, write_spec
from trm.cli.main import main
from trm.errors import TrmError
from trm.plugins.tasks.arc.tasks import parse_grid
from trm.plugins.trackers.wandb import ID_FILE, run_id

__all__ = ["arc_data", "arc_run"]  # fixtures of test_arc_eval, used here too


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for a folder): equal snapshots mean
    nothing was written, changed or removed."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A tiny 4x4 Sudoku run of 2 steps."""
    base = tmp_path_factory.mktemp("bad_input")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, max_steps=2)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    return SimpleNamespace(base=base, data=data, spec=spec, run=run_dir)


# ------------------------------------------------------------------ data build's help


def test_data_build_help_without_a_source_prints_help_and_the_sources(cli):
    result = cli("data", "build", "--help")
    assert result.code == 0, result.err
    for word in ("--out", "--seed", "--force", "data sources:", "maze", "arc", "sudoku"):
        assert word in result.out


@pytest.mark.parametrize("source", ["maze", "arc", "sudoku"])
def test_a_sources_help_lists_out_seed_and_force(cli, source):
    result = cli("data", "build", source, "--help")
    assert result.code == 0, result.err
    for flag in ("--out", "--seed", "--force"):
        assert flag in result.out


def test_data_build_without_a_source_is_one_line(cli, tmp_path):
    assert_one_line_error(cli("data", "build", "--out", tmp_path / "d"), "needs a data source")
    assert not (tmp_path / "d").exists()


# ------------------------------------------------------------------ the maze's size


def test_a_maze_larger_than_the_bound_is_refused_by_data_build(cli, tmp_path):
    result = cli(
        "data", "build", "maze", "--preset", "", "--size", "30000", "--min-walls", "0",
        "--max-walls", "10", "--min-path", "1", "--out", tmp_path / "maze",
    )  # fmt: skip
    assert_one_line_error(result, "data.generate.size", "between 2 and 100", "30000")
    assert not (tmp_path / "maze").exists()


def test_a_maze_larger_than_the_bound_is_refused_by_run_before_any_folder(cli, tmp_path):
    out = tmp_path / "runs" / "maze"
    result = cli("run", "maze-small", "--set", "data.generate.size=30000", "--out", out)
    assert_one_line_error(result, "data.generate.size", "30000")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ ARC task files


def test_a_grid_cell_true_is_refused_like_1_0():
    for cell in (True, 1.0, False):
        with pytest.raises(TrmError, match="integers 0-9"):
            parse_grid([[0, cell], [1, 2]], "task x")
    assert parse_grid([[0, 1], [2, 9]], "task x").tolist() == [[0, 1], [2, 9]]


def _arc_folders(tmp_path: Path) -> tuple[Path, Path]:
    """ARC Prize files of 2 training and 1 evaluation tasks, and a ConceptARC folder."""
    rng = np.random.default_rng(3)
    tasks = tmp_path / "tasks"
    _prize_files(tasks, "training", [_task(f"trn{n}", rng) for n in range(2)])
    _prize_files(tasks, "evaluation", [_task("evl0", rng)])
    concept = tmp_path / "concept-root"
    (concept / "concept").mkdir(parents=True)
    return tasks, concept


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
        (
            '{"train": [{"input": [[0, true]], "output": [[1, 0]]}], '
            '"test": [{"input": [[0, 1]]}]}',
            "integers 0-9",
        ),
    ],
    ids=["deep-json", "cell-true"],
)
def test_a_bad_concept_task_is_one_line_naming_the_file(cli, tmp_path, text, fragment):
    tasks, concept = _arc_folders(tmp_path)
    bad = concept / "concept" / "bad.json"
    bad.write_text(text)
    out = tmp_path / "arc"
    result = cli(
        "data", "build", "arc", "--tasks", tasks, "--concept", concept, "--side", "8",
        "--out", out,
    )  # fmt: skip
    assert_one_line_error(result, fragment)
    assert "bad.json" in error_lines(result.err)[0]
    assert not out.exists()


def test_solve_with_a_deeply_nested_task_file_is_one_line(arc_run, cli, tmp_path, monkeypatch):
    _scored_arc_plugins(monkeypatch)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    before = snapshot(tmp_path)
    result = cli("solve", arc_run, deep, "--png", tmp_path / "answer.png")
    assert_one_line_error(result, str(deep), "nests too deeply")
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------ a refused run


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--set", "data.generate.count=-1"], "data.generate.count"),
        (["--plugins", "curriculum", "--set", "plugins.curriculum.bogus=1"], "bogus"),
    ],
    ids=["bad-generate-value", "bad-plugin-table"],
)
def test_a_refused_run_creates_no_folder(cli, tmp_path, extra, fragment):
    out = tmp_path / "new" / "run"
    assert_one_line_error(cli("run", "quickstart", "--out", out, *extra), fragment)
    assert not (tmp_path / "new").exists()


def test_a_refused_run_leaves_an_existing_folder_as_it_was(cli, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    result = cli("run", "quickstart", "--out", out, "--set", "data.generate.count=-1")
    assert_one_line_error(result, "data.generate.count")
    assert snapshot(out) == before


# ------------------------------------------------------------------ eval --submission


def test_a_submission_into_an_unwritable_folder_is_refused_before_evaluating(
    arc_run, cli, tmp_path, monkeypatch
):
    """Root writes anywhere, so the read-only folder is a write that fails as on one."""
    _scored_arc_plugins(monkeypatch)
    folder = tmp_path / "ro"
    folder.mkdir()
    real_write = Path.write_text

    def read_only(self, *args, **kwargs):
        if self.parent == folder:
            raise OSError(30, "Read-only file system")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", read_only)
    from trm.plugins.evaluation import eval_cmd

    monkeypatch.setattr(eval_cmd, "evaluate", lambda *a, **k: pytest.fail("evaluated"))
    result = cli("eval", arc_run, "--submission", folder / "sub.json")
    assert_one_line_error(result, "--submission", "Read-only file system")
    assert snapshot(folder) == {}


def test_a_submission_whose_write_fails_at_the_end_is_one_line(arc_run, cli, tmp_path, monkeypatch):
    """The folder turns read-only during the evaluation: the clean-up fails too."""
    _scored_arc_plugins(monkeypatch)
    from trm.plugins.evaluation import eval_cmd

    def fail(*_args):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(eval_cmd.os, "replace", fail)
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: fail())
    result = cli("eval", arc_run, "--submission", tmp_path / "sub.json")
    assert_one_line_error(result, "--submission", "cannot be written")


def test_a_submission_that_replaces_a_file_says_so(arc_run, cli, tmp_path, monkeypatch):
    _scored_arc_plugins(monkeypatch)
    target = tmp_path / "sub.json"
    target.write_text("old\n")
    result = cli("eval", arc_run, "--submission", target)
    assert result.code == 0, result.err
    assert f"--submission {target} exists: replacing it" in result.err
    assert json.loads(target.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub.json"]


def test_an_identifiers_file_cut_to_the_blank_is_refused(
    arc_run, arc_data, cli, tmp_path, monkeypatch
):
    import shutil

    _scored_arc_plugins(monkeypatch)
    data = tmp_path / "data"
    shutil.copytree(arc_data[0], data)
    (data / "identifiers.json").write_text('["<blank>"]')
    before = snapshot(tmp_path)
    result = cli("eval", arc_run, "--data", data, "--submission", tmp_path / "sub.json")
    assert_one_line_error(result, "identifiers.json", "rebuild the dataset")
    assert snapshot(tmp_path) == before


def test_solve_says_when_its_picture_replaces_a_file(arc_run, arc_data, cli, tmp_path, monkeypatch):
    _scored_arc_plugins(monkeypatch)
    task_id = arc_data[1][0].task_id
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{task_id}.png").write_bytes(b"mine")
    result = cli("solve", arc_run, task_id)
    assert result.code == 0, result.err
    assert f"wrote {task_id}.png, replacing the file there" in result.err
    assert (tmp_path / f"{task_id}.png").read_bytes() != b"mine"


# ------------------------------------------------------------------ a closed pipe


def _closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """``python -m trm ARGS`` whose stdout reader has gone before it writes anything."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trm", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    process.stdout.close()  # the reader is gone before trm has even started
    err = process.stderr.read().decode()
    process.wait(timeout=120)
    return subprocess.CompletedProcess(args, process.returncode, "", err)


def test_a_closed_pipe_ends_plugins_json_quietly():
    done = _closed_pipe("plugins", "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_a_closed_pipe_ends_report_json_quietly(tiny, tmp_path):
    done = _closed_pipe("report", str(tiny.run), "--out", str(tmp_path / "r"), "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


# ------------------------------------------------------------------ trm report


def test_report_on_metrics_that_are_a_folder_is_one_line(cli, tmp_path):
    run = tmp_path / "run"
    (run / "metrics.jsonl").mkdir(parents=True)
    assert_one_line_error(cli("report", run), "metrics.jsonl is a folder")
    assert snapshot(run) == {"metrics.jsonl": None}


def test_report_on_a_run_with_only_the_step_0_event_is_one_line(cli, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    row = {"kind": "event", "step": 0, "event": "recursion", "H_cycles": 1, "L_cycles": 1}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    before = snapshot(run)
    assert_one_line_error(cli("report", run), "no training rows")
    assert snapshot(run) == before


def test_report_refuses_an_empty_out(tiny, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "index.html").write_text("my page")
    before = snapshot(tmp_path)
    assert_one_line_error(cli("report", tiny.run, "--out", ""), "--out", "empty")
    assert snapshot(tmp_path) == before


def test_report_refuses_a_folder_of_the_users(tiny, cli, tmp_path):
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "index.html").write_text("my page")
    before = snapshot(mine)
    result = cli("report", tiny.run, "--out", mine)
    assert_one_line_error(result, "did not write", "index.html")
    assert snapshot(mine) == before


def test_report_replaces_its_own_report_and_says_so(tiny, cli, tmp_path):
    out = tmp_path / "report"
    assert cli("report", tiny.run, "--out", out).code == 0
    again = cli("report", tiny.run, "--out", out)
    assert again.code == 0, again.err
    assert f"replacing the report in {out}" in again.err


# ------------------------------------------------------------------ loggers


def test_tensorboard_that_cannot_write_warns_once_and_the_run_goes_on(tiny, cli, tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    run.mkdir()
    (run / "tensorboard").write_text("a file where the folder goes\n")
    result = cli("run", tiny.spec, "--out", run, "--plugins", "tensorboard")
    assert result.code == 0, result.err
    warnings = [line for line in result.err.splitlines() if "tensorboard:" in line]
    assert len(warnings) == 1 and "not logged to TensorBoard" in warnings[0], result.err
    assert "Traceback" not in result.err
    assert summary(run)["steps"] == 2


def test_a_wandb_run_id_that_is_not_text_gets_a_new_id(tmp_path):
    (tmp_path / ID_FILE).write_bytes(b"\xff\xfe\x00bad")
    said: list[str] = []
    new = run_id(tmp_path, fresh=False, say=said.append)
    assert re.fullmatch(r"[a-z0-9]{8}", new)
    assert (tmp_path / ID_FILE).read_text().strip() == new
    assert len(said) == 1 and "no W&B run id" in said[0]
    assert run_id(tmp_path, fresh=False, say=said.append) == new  # kept from now on


def test_a_bogus_wandb_mode_is_one_warning_line(tiny, cli, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "bogus")
    run = tmp_path / "run"
    result = cli("run", tiny.spec, "--out", run, "--plugins", "wandb")
    assert result.code == 0, result.err
    lines = [line for line in result.err.splitlines() if "wandb:" in line or "W&B" in line]
    assert len(lines) == 1, result.err
    assert "WANDB_MODE=bogus is not a W&B mode" in lines[0]
    assert not (run / "wandb").exists()


# ------------------------------------------------------------------ the contrib tables


@pytest.mark.parametrize(
    "value, expected",
    [
        ("[1,2]", "plugins.curriculum.stages[0]: expected a table, got 1"),
        ("5", "plugins.curriculum.stages: expected a list of tables"),
        ('"x"', "plugins.curriculum.stages: expected a list of tables"),
    ],
)
def test_a_bad_stages_value_says_what_was_expected_in_the_users_words(cli, value, expected):
    result = cli(
        "estimate", "quickstart", "--plugins", "curriculum", "--set",
        f"plugins.curriculum.stages={value}",
    )  # fmt: skip
    assert_one_line_error(result, expected)
    line = error_lines(result.err)[0]
    assert "trm.contrib" not in line and "unknown error" not in line and "tuple[" not in line


# ------------------------------------------------------------------ eval and solve


def test_eval_shows_loss_and_halt_steps_as_numbers_not_percentages(tiny, cli):
    result = cli("eval", tiny.run)
    assert result.code == 0, result.err
    assert re.search(r"exact accuracy [0-9.]+%", result.out)
    assert re.search(r", loss [0-9.e+-]+(,|$)", result.out), result.out
    assert re.search(r"mean halt steps [0-9.]+(,|$)", result.out), result.out


@pytest.mark.parametrize("name", ["puzzles/puzle1.txt", "puzle1.txt"])
def test_solve_with_a_misspelt_file_name_says_the_file_does_not_exist(tiny, cli, name):
    result = cli("solve", tiny.run, name)
    assert_one_line_error(result, f"puzzle file {name} does not exist")


def test_solve_with_a_binary_file_gets_no_sudoku_advice(tiny, cli, tmp_path):
    binary = tmp_path / "maze.bin"
    binary.write_bytes(bytes(range(256)))
    result = cli("solve", tiny.run, binary)
    assert_one_line_error(result, "not UTF-8 text", "save the puzzle as plain text")
    assert "'.'" not in error_lines(result.err)[0]


# ------------------------------------------------------------------ a spec's plugin tables


def test_a_specs_plugin_table_switches_the_plugin_on_and_no_name_keeps_it_off(tmp_path):
    from trm.plugin_manager import load_plugins

    on = load_plugins([], spec_tables=["curriculum"])
    assert "curriculum" in on.enabled_names()
    assert "curriculum (by [plugins.curriculum])" in on.describe_enabled()
    off = load_plugins(["no:curriculum"], spec_tables=["curriculum"])
    assert "curriculum" not in off.enabled_names()
    assert "curriculum" not in load_plugins([]).enabled_names()
    # a table naming no plugin is left to the spec check, which names the table
    assert "nosuch" not in load_plugins([], spec_tables=["nosuch"]).enabled_names()


def test_the_laptop_recipe_runs_with_its_curriculum_without_a_flag(cli, tmp_path):
    """`trm run sudoku9-laptop --max-steps 1` (its data built small, to stay quick)."""
    small = ["--set", "data.generate.count=64", "--set", "data.generate.test_count=16"]
    result = cli("run", "sudoku9-laptop", "--max-steps", "1", "--out", tmp_path / "r", *small)
    assert result.code == 0, result.err
    line = next(ln for ln in result.err.splitlines() if ln.startswith("trm: plugins on:"))
    assert "curriculum (by [plugins.curriculum])" in line
    assert "curriculum stage 1 of 3" in result.err


# ------------------------------------------------------------------ under torchrun


def _torchrun_script(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    """Two ranks (gloo, this CPU), each running the shell ``script`` (it sees RANK)."""
    from tests.test_distributed import PROCESS_TIMEOUT_S, _clean_env

    wrapper = tmp_path / "rank.sh"
    wrapper.write_text(f"#!/bin/sh\n{script}\n")
    wrapper.chmod(0o755)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "--max-restarts", "0", "--no-python", str(wrapper)]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=_clean_env(TRM_COLLECTIVE_TIMEOUT_S="60"),
        timeout=PROCESS_TIMEOUT_S,
    )


@pytest.mark.slow
def test_under_torchrun_a_bad_spec_is_one_whole_error_line(tiny, tmp_path):
    from tests.test_distributed import torchrun

    done = torchrun(tiny.spec, tmp_path / "run", "--set", "train.lr=abc")
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert "train.lr" in lines[0] and lines[0].count("trm:") == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_under_torchrun_a_refused_run_folder_is_one_error_line(tiny, tmp_path):
    from tests.test_distributed import torchrun

    out = tmp_path / "file"
    out.write_text("a file where the run folder goes\n")
    done = torchrun(tiny.spec, out)
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert "not writable" in lines[0] and "rank" not in lines[0]
    assert out.read_text() == "a file where the run folder goes\n"


@pytest.mark.slow
def test_ranks_given_different_max_steps_stop_where_rank_0_does(tiny, tmp_path):
    run_dir = tmp_path / "run"
    script = (
        f'steps=1; [ "$RANK" = 0 ] || steps=2\n'
        f'exec {sys.executable} -m trm run {tiny.spec} --out {run_dir} --max-steps "$steps"'
    )
    done = _torchrun_script(tmp_path, script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 was given --max-steps 2; every rank stops where rank 0 does" in done.stderr
    assert summary(run_dir)["steps"] == 1
