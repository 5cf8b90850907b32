"""Bad input never gives a traceback: one `trm: error:` line naming the problem, exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import assert_one_line_error

TINY_SPEC = """
name = "tiny"
[arch]
hidden_size = 16
num_heads = 2
H_cycles = 1
L_cycles = 1
L_layers = 1
puzzle_emb_ndim = 0
puzzle_emb_len = 1
halt_max_steps = 2
[train]
global_batch_size = 8
max_steps = 1
[data]
source = "sudoku"
dir = "{data_dir}"
"""


def _spec(tmp_path: Path, data_dir: Path, extra: str = "") -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(TINY_SPEC.format(data_dir=data_dir) + extra)
    return path


@pytest.fixture(scope="module")
def sudoku_dir(tmp_path_factory) -> Path:
    from trm.cli.main import main

    out = tmp_path_factory.mktemp("data") / "sudoku4"
    assert (
        main(
            [
                "data",
                "build",
                "sudoku",
                "--out",
                str(out),
                "--size",
                "4",
                "--count",
                "40",
                "--test-count",
                "10",
                "--clues",
                "8",
            ]
        )
        == 0
    )
    return out


def test_unknown_plugin(cli, tmp_path, sudoku_dir):
    result = cli("run", _spec(tmp_path, sudoku_dir), "--plugins", "turbo", "--out", tmp_path / "r")
    assert_one_line_error(result, "unknown plugin 'turbo'", "known plugins")


def test_malformed_toml(cli, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[train\nlr = 1")
    assert_one_line_error(cli("run", path), "malformed TOML", str(path))


def test_unknown_key(cli, tmp_path, sudoku_dir):
    path = _spec(tmp_path, sudoku_dir, "[runtime]\nthreadz = 2\n")
    assert_one_line_error(cli("run", path), "threadz", "[runtime]")


def test_wrong_type(cli, tmp_path, sudoku_dir):
    path = _spec(tmp_path, sudoku_dir).read_text().replace("max_steps = 1", 'max_steps = "one"')
    (tmp_path / "typed.toml").write_text(path)
    assert_one_line_error(cli("run", tmp_path / "typed.toml"), "train.max_steps")


def test_impossible_value(cli, tmp_path, sudoku_dir):
    result = cli("run", _spec(tmp_path, sudoku_dir), "--set", "arch.hidden_size=15")
    assert_one_line_error(result, "arch.hidden_size", "not divisible")


def test_missing_data_directory(cli, tmp_path):
    result = cli("run", _spec(tmp_path, tmp_path / "nowhere"), "--out", tmp_path / "r")
    assert_one_line_error(result, "does not exist", "trm data build")


def test_arrays_of_inconsistent_length(cli, tmp_path, sudoku_dir):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sudoku_dir, broken)
    labels_path = broken / "train" / "all__labels.npy"
    np.save(labels_path, np.load(labels_path)[:-3])
    result = cli("run", _spec(tmp_path, broken), "--out", tmp_path / "r")
    assert_one_line_error(result, "all__labels.npy")


def test_unknown_shipped_spec_lists_the_shipped_ones(cli):
    assert_one_line_error(cli("run", "no-such-spec"), "quickstart")


def test_unknown_command_option_is_one_line(cli):
    assert_one_line_error(cli("run"), "spec")


def test_missing_checkpoint_for_eval(cli, tmp_path):
    assert_one_line_error(cli("eval", tmp_path / "none.pt"), "does not exist")


def test_data_build_bad_option_names_the_field(cli, tmp_path):
    result = cli("data", "build", "sudoku", "--out", tmp_path / "d", "--size", "5")
    assert_one_line_error(result, "size")


@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "0"])
def test_bench_peak_seconds_must_be_a_finite_positive_number(cli, seconds):
    result = cli("bench", "quickstart", f"--peak-seconds={seconds}")
    assert_one_line_error(result, "--peak-seconds", "finite number of seconds above 0")
