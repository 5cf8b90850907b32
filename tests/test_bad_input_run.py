"""Bad input to `trm run` (and the spec every command reads) gives one `trm: error:` line and
exit 2 — and never costs the work already in a run directory."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import assert_one_line_error, error_lines
from tests.tiny_run import build_tiny_data, checkpoint_steps, metrics, summary, write_spec
from trm.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("badrun")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, max_steps=3)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    return SimpleNamespace(base=base, data=data, spec=spec, run_dir=run_dir)


# ---------------------------------------------------------------- spec values (--set)

SET_CASES = [
    ("threads-huge", "runtime.threads=100000", "runtime.threads"),
    ("threads-negative", "runtime.threads=-1", "runtime.threads"),
    ("rope-theta-negative", "arch.rope_theta=-1.0", "arch.rope_theta"),
    ("lr-inf", "train.lr=inf", "train.lr"),
    ("lr-nan", "train.lr=nan", "train.lr"),
    ("lr-zero", "train.lr=0.0", "train.lr"),
    ("epochs-inf", "train.epochs=inf", "train.epochs"),
    ("batch-inf", "train.global_batch_size=inf", "train.global_batch_size"),
    ("batch-zero", "train.global_batch_size=0", "train.global_batch_size"),
    ("seed-negative", "train.seed=-1", "train.seed"),
    ("seed-too-big", "train.seed=99999999999", "train.seed"),
    ("name-empty", "name=", "name"),
    ("name-escapes", "name=../..", "name"),
    ("name-slash", "name=a/b", "name"),
    ("hidden-zero", "arch.hidden_size=0", "arch.hidden_size"),
    ("hidden-huge", "arch.hidden_size=10000000", "arch.hidden_size"),
    ("hidden-float", "arch.hidden_size=1.5", "arch.hidden_size"),
    ("heads-not-dividing", "arch.num_heads=3", "arch.hidden_size"),
    ("expansion-zero", "arch.expansion=0.0", "arch.expansion"),
    ("exploration-above-one", "arch.halt_exploration_prob=2.0", "arch.halt_exploration_prob"),
    ("ema-rate-one", "train.ema_rate=1.0", "train.ema_rate"),
    ("lr-min-ratio-negative", "train.lr_min_ratio=-0.5", "train.lr_min_ratio"),
    ("max-steps-negative", "train.max_steps=-3", "train.max_steps"),
    ("keep-zero", "train.checkpoint_keep=0", "train.checkpoint_keep"),
    ("micro-negative", "runtime.micro_batch_size=-1", "runtime.micro_batch_size"),
    ("micro-above-batch", "runtime.micro_batch_size=9", "runtime.micro_batch_size"),
    ("eval-split-escapes", "data.eval_split=../x", "data.eval_split"),
    ("device-unknown", "runtime.device=tpu", "runtime.device"),
    ("compile-unknown", "runtime.compile=maybe", "runtime.compile"),
    ("precision-unknown", "runtime.precision=fp8", "runtime.precision"),
    ("bool-as-int", "train.ema=1", "train.ema"),
    ("unknown-key", "train.lrr=1", "lrr"),
    ("unknown-section", "model.hidden=1", "model"),
    ("no-equals", "train.lr", "KEY=VALUE"),
    ("no-section", "lr=1", "section"),
    ("data-dir-missing", "data.dir=/nonexistent/trm-data", "does not exist"),
    ("reader-unknown", "data.reader=fast", "data.reader"),
    ("prefetch-negative", "data.prefetch_steps=-1", "data.prefetch_steps"),
    ("source-unknown", "data.source=chess", "chess"),
    ("window-without-attention", "arch.attention_window=1", "needs attention, but arch.mlp_t"),
    ("window-negative", "arch.attention_window=-1", "attention_window: -1 is outside"),
]


@pytest.mark.parametrize(("case", "override", "fragment"), SET_CASES, ids=[c[0] for c in SET_CASES])
def test_a_bad_spec_value_is_one_line_naming_the_key(tiny, tmp_path, cli, case, override, fragment):
    result = cli("run", tiny.spec, "--set", override, "--out", tmp_path / "run")
    assert_one_line_error(result, fragment)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_more_threads_than_cpus_is_refused_before_torch_sees_them(tiny, tmp_path, cli):
    too_many = (os.cpu_count() or 1) + 1
    result = cli("run", tiny.spec, "--set", f"runtime.threads={too_many}", "--out", tmp_path / "r")
    assert_one_line_error(result, "runtime.threads", "logical CPUs")


def test_data_dir_naming_a_file_says_it_is_a_file(tiny, tmp_path, cli):
    result = cli("run", tiny.spec, "--set", f"data.dir={tiny.spec}", "--out", tmp_path / "r")
    assert_one_line_error(result, "is a file, not a dataset directory")


def test_data_dir_holding_another_sources_dataset_is_refused(tiny, tmp_path, cli):
    maze = tmp_path / "maze"
    build = ["data", "build", "maze", "--preset", "", "--size", "4", "--min-walls", "1"]
    build += ["--max-walls", "3", "--min-path", "2", "--count", "16", "--test-count", "4"]
    assert main([*build, "--workers", "1", "--out", str(maze)]) == 0
    # a 4x4 maze has a 4x4 Sudoku's row length and vocabulary: its labels tell them apart
    result = cli("run", tiny.spec, "--set", f"data.dir={maze}", "--out", tmp_path / "run")
    assert_one_line_error(
        result, f"data.dir: {maze} does not hold sudoku puzzles", "does not solve its puzzle"
    )
    assert not (tmp_path / "run").exists()
    result = cli("run", tiny.spec, "--set", "data.source=maze", "--out", tmp_path / "run")
    assert_one_line_error(result, "does not hold maze puzzles", "not a path from S to G")
    assert not (tmp_path / "run").exists()
    result = cli("run", tiny.spec, "--set", "data.source=arc", "--out", tmp_path / "run")
    assert_one_line_error(result, "does not hold arc puzzles", "ARC's has 12")


def test_a_dataset_whose_build_record_names_another_source_is_not_that_sources(tiny, tmp_path):
    import shutil

    from trm.plan.dataset import dataset_problem

    class Unjudging:  # a source without dataset_problem: only the record can tell
        name = "maze"

    copied = shutil.copytree(tiny.data, tmp_path / "data")
    assert dataset_problem(Unjudging(), copied, "train") is None
    (copied / "build.json").write_text('{"source": "sudoku", "options": {}, "seed": 0}')
    assert "the 'sudoku' source built it" in dataset_problem(Unjudging(), copied, "train")


# ---------------------------------------------------------------- spec files and options


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


SPEC_FILE_CASES = [
    ("not-utf8", lambda p: _write(p / "s.toml", b'name = "x"\n# \xff\xfe\n'), "UTF-8"),
    ("malformed", lambda p: _write(p / "s.toml", b"name = \n[arch\n"), "malformed TOML"),
    ("unknown-key", lambda p: _write(p / "s.toml", b"[arch]\nhidden = 3\n"), "hidden"),
    ("wrong-type", lambda p: _write(p / "s.toml", b'[train]\nlr = "fast"\n'), "train.lr"),
    ("missing", lambda p: p / "absent.toml", "does not exist"),
    ("a-directory", lambda p: p, "spec"),
]


@pytest.mark.parametrize(
    ("case", "make", "fragment"), SPEC_FILE_CASES, ids=[c[0] for c in SPEC_FILE_CASES]
)
def test_a_bad_spec_file_is_one_line(tmp_path, cli, case, make, fragment):
    result = cli("run", make(tmp_path), "--out", tmp_path / "run")
    assert_one_line_error(result, fragment)


OPTION_CASES = [
    ("max-steps-zero", ["--max-steps", "0"], "--max-steps"),
    ("max-steps-word", ["--max-steps", "many"], "--max-steps"),
    ("checkpoint-every-zero", ["--checkpoint-every", "0"], "--checkpoint-every"),
    ("checkpoint-every-word", ["--checkpoint-every", "often"], "--checkpoint-every"),
    ("mode-unknown", ["--mode", "turbo"], "--mode"),
    ("plugin-unknown", ["--plugins", "nope"], "nope"),
    ("plugin-off-unknown", ["--plugins", "no:nope"], "nope"),
    ("resume-missing", ["--resume", "/nonexistent/ckpt.pt"], "--resume"),
    ("replace-without-never", ["--replace"], "--resume never"),
    ("unknown-option", ["--fast"], "--fast"),
]


@pytest.mark.parametrize(
    ("case", "args", "fragment"), OPTION_CASES, ids=[c[0] for c in OPTION_CASES]
)
def test_a_bad_run_option_is_one_line(tiny, tmp_path, cli, case, args, fragment):
    result = cli("run", tiny.spec, *args, "--out", tmp_path / "run")
    assert_one_line_error(result, fragment)


def test_a_file_that_is_not_a_checkpoint_given_to_resume_is_one_line(tiny, tmp_path, cli):
    fake = _write(tmp_path / "fake.pt", b"this is not a checkpoint\n")
    result = cli("run", tiny.spec, "--resume", fake, "--out", tmp_path / "run")
    assert_one_line_error(result, "fake.pt")


def test_out_naming_a_file_is_one_line(tiny, tmp_path, cli):
    target = _write(tmp_path / "a-file", b"x")
    assert_one_line_error(cli("run", tiny.spec, "--out", target), "not writable")


OTHER_COMMAND_CASES = [
    ("estimate-mode", ["estimate", "{spec}", "--mode", "turbo"], "--mode"),
    ("estimate-set", ["estimate", "{spec}", "--set", "train.lr=-1"], "train.lr"),
    ("bench-warmup", ["bench", "{spec}", "--warmup", "0"], "--warmup"),
    ("bench-peak", ["bench", "{spec}", "--peak-seconds", "0"], "--peak-seconds"),
    ("bench-steps", ["bench", "{spec}", "--steps", "0"], "--steps"),
    ("analyze-set", ["analyze", "{spec}", "--set", "arch.L_cycles=0"], "arch.L_cycles"),
    ("no-command", [], "COMMAND"),
    ("unknown-command", ["train"], "train"),
]


@pytest.mark.parametrize(
    ("case", "args", "fragment"), OTHER_COMMAND_CASES, ids=[c[0] for c in OTHER_COMMAND_CASES]
)
def test_bad_input_to_other_commands_is_one_line(tiny, cli, case, args, fragment):
    result = cli(*[a.format(spec=tiny.spec) for a in args])
    assert_one_line_error(result, fragment)


# ---------------------------------------------------------------- work is never lost


def _files(run_dir: Path) -> dict[str, str]:
    """Every file of a run directory and its SHA-256 (the lock file holds a pid: left out)."""
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _copy_of_reference(tiny, tmp_path) -> Path:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(tiny.run_dir, run_dir)
    return run_dir


def test_a_refused_resume_leaves_every_file_of_the_run_byte_identical(tiny, tmp_path, cli):
    run_dir = _copy_of_reference(tiny, tmp_path)
    before = _files(run_dir)
    result = cli("run", tiny.spec, "--set", "arch.hidden_size=32", "--out", run_dir)
    assert_one_line_error(result, "does not fit this run's architecture", "hidden_size")
    assert _files(run_dir) == before


def test_resume_never_into_a_used_directory_is_refused_and_changes_nothing(tiny, tmp_path, cli):
    run_dir = _copy_of_reference(tiny, tmp_path)
    before = _files(run_dir)
    result = cli("run", tiny.spec, "--resume", "never", "--out", run_dir)
    assert_one_line_error(result, "holds the run 'tiny'", "newest at step 3", "--replace")
    assert _files(run_dir) == before


def test_resume_never_with_replace_starts_afresh(tiny, tmp_path, cli):
    run_dir = _copy_of_reference(tiny, tmp_path)
    spec = write_spec(tmp_path, tiny.data, max_steps=2)
    result = cli("run", spec, "--resume", "never", "--replace", "--out", run_dir)
    assert result.code == 0, result.err
    assert checkpoint_steps(run_dir) == [1, 2]
    assert [r["step"] for r in metrics(run_dir) if "kind" not in r] == [1, 2]
    assert summary(run_dir)["steps"] == 2


def test_switching_the_checkpoint_plugin_off_warns_at_once(tiny, tmp_path, cli):
    result = cli("run", tiny.spec, "--plugins", "no:checkpoint", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert "warning: no plugin saves checkpoints" in result.err
    assert summary(tmp_path / "run")["checkpoint_step"] is None


def test_max_steps_counts_the_steps_of_the_run_in_all(tiny, tmp_path, cli, capsys):
    """--max-steps N stops once the run has taken N steps in all, counting those of the
    checkpoint it resumes from — as its help says."""
    run_dir = _copy_of_reference(tiny, tmp_path)  # 3 steps done
    spec = write_spec(tmp_path, tiny.data, max_steps=12)
    result = cli("run", spec, "--max-steps", "5", "--out", run_dir)
    assert result.code == 0, result.err
    assert summary(run_dir)["steps"] == 5
    assert summary(run_dir)["stopped"] == "max_steps"
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = capsys.readouterr().out
    assert "counting the steps of the checkpoint it resumes from" in " ".join(help_text.split())


def test_a_disk_that_fills_up_warns_then_stops_after_three_failed_saves(tiny, tmp_path):
    """Files may not grow past 40 KiB (RLIMIT_FSIZE, the kernel's own refusal, as a full disk
    refuses): every checkpoint write fails. The run warns, stops after three failures with
    one error line and exit 1, and the checkpoint it resumed from is intact."""
    run_dir = _copy_of_reference(tiny, tmp_path)
    spec = write_spec(tmp_path, tiny.data, max_steps=12)
    before = _files(run_dir)

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (40 * 1024, 40 * 1024))

    done = subprocess.run(
        [sys.executable, "-m", "trm", "run", str(spec), "--out", str(run_dir)],
        capture_output=True,
        text=True,
        preexec_fn=limit_file_size,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = error_lines(done.stderr)
    assert "3 checkpoint saves in a row failed" in line
    assert "the checkpoint of step 3 is intact" in line
    assert done.stderr.count("warning: checkpoint at step") == 3
    for name in ("checkpoints/step-00000003.pt", "checkpoints/step-00000003.pt.sha256"):
        assert _files(run_dir)[name] == before[name]
    assert summary(run_dir)["stopped"] == "failed"


# ---------------------------------------------------------------- frictions of the first hour


def test_a_plugin_that_fails_to_import_can_be_switched_off(cli, monkeypatch):
    from importlib import metadata

    import trm.plugin_manager as plugin_manager

    broken = metadata.EntryPoint(name="broken", value="trm_no_such_module_x", group="trm.plugins")
    real = plugin_manager._entry_points
    group = plugin_manager.ENTRY_POINT_GROUP  # the plugins, not the torch-free solvers
    monkeypatch.setattr(
        plugin_manager,
        "_entry_points",
        lambda g=group: [*real(g), *([broken] if g == group else [])],
    )
    assert_one_line_error(cli("plugins"), "'broken'", "--plugins no:broken")
    result = cli("plugins", "--json", "--plugins", "no:broken")
    assert result.code == 0, result.err
    assert "broken" in result.out


def test_estimate_fits_the_spec_to_the_same_default_mode_as_run_and_says_so(tiny, cli):
    result = cli("estimate", tiny.spec)
    assert result.code == 0, result.err
    assert "mode balanced (the default of trm run)" in result.err


def test_a_run_without_evaluation_does_not_claim_an_accuracy(tiny, tmp_path, cli):
    spec = write_spec(tmp_path, tiny.data, max_steps=2, eval_interval=0)
    result = cli("run", spec, "--set", "data.eval_split=none", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert "no evaluation ran" in result.out and "0.00%" not in result.out
    assert summary(tmp_path / "run")["best_exact_accuracy"] is None


def test_the_live_progress_line_never_wraps(monkeypatch, capsys):
    from trm.plugins.operations import progress

    display = progress.Progress()
    display.tty = True
    monkeypatch.setattr(progress.shutil, "get_terminal_size", lambda *_: os.terminal_size((30, 5)))
    display.show("step 10/800  720 samples/s  loss 0.1234  eval exact 99.0%  ETA 1m02s")
    written = capsys.readouterr().out
    assert written.startswith("\r\033[K") and len(written.removeprefix("\r\033[K")) <= 29


def test_log_lines_clear_a_live_progress_line_first(monkeypatch, capsys):
    from trm.cli import output

    monkeypatch.setattr(output.sys.stdout, "isatty", lambda: True)
    output.info("checkpoints every ~120 steps")
    captured = capsys.readouterr()
    assert captured.out == "\r\033[K" and captured.err == "trm: checkpoints every ~120 steps\n"


def test_sigterm_says_sigterm_not_ctrl_c(capfd):
    from trm.loop.signals import StopRequests

    stops = StopRequests()
    stops._handle(signal.SIGTERM, None)
    err = capfd.readouterr().err
    assert stops.reason == "terminated"
    assert "SIGTERM" in err and "Ctrl-C" not in err


def test_a_cpu_only_torch_reports_no_accelerators_rather_than_unknown(cli):
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    result = cli("analyze", "--profile-only")
    assert result.code == 0, result.err
    assert "accelerators               none" in result.out


def test_generated_tier_specs_share_one_built_dataset(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "gen.toml"
    spec.write_text(
        tiny.spec.read_text().replace(
            f'dir = "{tiny.data}"',
            "[data.generate]\nsize = 4\ncount = 16\ntest_count = 4\nclues = 8\nworkers = 1",
        )
    )
    result = cli("analyze", spec, "--no-measure", "--generate-configs", tmp_path / "gen")
    assert result.code == 0, result.err
    data_dir = (tmp_path / "gen" / "data").resolve()
    assert (data_dir / "train" / "dataset.json").is_file()
    for mode in ("conservative", "balanced", "extreme"):
        generated = (tmp_path / "gen" / f"tiny-{mode}.toml").read_text()
        assert f'dir = "{data_dir}"' in generated
    run = cli("run", tmp_path / "gen" / "tiny-balanced.toml", "--max-steps", "1")
    assert run.code == 0, run.err
    assert not (tmp_path / "runs" / "tiny-balanced" / "data").exists()


# ---------------------------------------------------------------- --out ""


def test_run_with_an_empty_out_is_refused_and_writes_nothing(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "" would train into the current folder
    (tmp_path / "mine.txt").write_text("my own file")
    result = cli("run", tiny.spec, "--out", "")
    assert_one_line_error(result, "--out", "empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_train_with_an_empty_out_is_refused_and_writes_nothing(tiny, tmp_path, monkeypatch):
    import trm
    from trm.errors import TrmError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("my own file")
    with pytest.raises(TrmError, match="out is empty"):
        trm.train(str(tiny.spec), out="", plugins=["no:progress"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
