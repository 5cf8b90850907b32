"""Bad input to ``trm data build`` gives one ``trm: error:`` line and exit code 2, and never
loses work: ``--force`` replaces only a dataset, and only once the new one is complete."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import error_lines
from trm.data.puzzle_dataset import open_split
from trm.plugins.tasks.sudoku import grid
from trm.plugins.tasks.sudoku.generator import generate_puzzle
from trm.plugins.tasks.sudoku.source import (
    DEFAULT_CLUES,
    SudokuBuildOptions,
    SudokuSource,
    max_clues,
)

TINY = ("--size", "4", "--count", "16", "--test-count", "4", "--workers", "1")
HEADER = "source,question,answer,rating\n"


def _fixtures(tmp_path: Path) -> dict[str, str]:
    """Files the bad-input cases point at, all in ``tmp_path/in``."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "plain.txt").write_text("not a folder\n")
    (d / "latin1.csv").write_bytes(HEADER.encode() + "x,caf\xe9,1,0\n".encode("latin-1"))
    (d / "badheader.csv").write_text("a,b,c\n")
    (d / "badrow.csv").write_text(HEADER + "x,123,456,0\n")
    (d / "empty.csv").write_text(HEADER)
    (d / "halfdir").mkdir()
    (d / "halfdir" / "train.csv").write_text(HEADER)
    (d / "full").mkdir()
    (d / "full" / "notes.txt").write_text("mine\n")
    return {
        "out": str(tmp_path / "out"),
        "file": str(d / "plain.txt"),
        "latin1": str(d / "latin1.csv"),
        "badheader": str(d / "badheader.csv"),
        "badrow": str(d / "badrow.csv"),
        "empty": str(d / "empty.csv"),
        "halfdir": str(d / "halfdir"),
        "full": str(d / "full"),
    }


BAD_INPUT = [
    pytest.param(("nosuch", "--out", "{out}"), "'nosuch'", id="unknown-source"),
    pytest.param((), "source", id="no-source"),
    pytest.param(("--plugins", "no:sudoku", "sudoku", "--out", "{out}"), "sudoku", id="source-off"),
    pytest.param(("sudoku", *TINY), "--out", id="out-missing"),
    pytest.param(("sudoku", "--out", "", *TINY), "--out", id="out-empty"),
    pytest.param(("sudoku", "--out", "{file}", *TINY), "is a file", id="out-is-a-file"),
    pytest.param(
        ("sudoku", "--out", "{file}", "--force", *TINY), "is a file", id="out-is-a-file-force"
    ),
    pytest.param(("sudoku", "--out", "{file}/sub", *TINY), "is a file", id="out-under-a-file"),
    pytest.param(("sudoku", "--out", "/", "--force", *TINY), "root", id="out-is-root"),
    pytest.param(("sudoku", "--out", "{full}", *TINY), "--force", id="out-not-empty"),
    pytest.param(
        ("sudoku", "--out", "{full}", "--force", *TINY), "not a trm dataset", id="force-on-junk"
    ),
    pytest.param(("sudoku", "--out", "{out}", "--bogus", "3"), "--bogus", id="unknown-option"),
    pytest.param(("sudoku", "--out", "{out}", "stray"), "stray", id="stray-argument"),
    pytest.param(("sudoku", "--out", "{out}", "--size", "x"), "--size", id="size-not-int"),
    pytest.param(("sudoku", "--out", "{out}", "--count", "1.5"), "--count", id="count-float"),
    pytest.param(("sudoku", "--out", "{out}", "--count"), "--count", id="count-no-value"),
    pytest.param(("sudoku", "--out", "{out}", *TINY, "--seed", "-1"), "--seed", id="seed-neg"),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--seed", str(2**32)), "--seed", id="seed-too-big"
    ),
    pytest.param(("sudoku", "--out", "{out}", "--seed", "one"), "--seed", id="seed-not-int"),
    pytest.param(("sudoku", "--out", "{out}", "--size", "5"), "data.generate.size", id="size-5"),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--count", "0"), "data.generate.count", id="count-0"
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--count", "-3"), "data.generate.count", id="count-neg"
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--test-count", "0"),
        "data.generate.test_count",
        id="test-count-0",
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--clues", "3"), "data.generate.clues", id="clues-few"
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--clues", "17"), "data.generate.clues", id="clues-many"
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--clues", "-1"), "data.generate.clues", id="clues-neg"
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--augment", "-1"),
        "data.generate.augment",
        id="augment-neg",
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--min-backtracks", "-2"),
        "data.generate.min_backtracks",
        id="min-backtracks-neg",
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", *TINY, "--workers", "-1"),
        "data.generate.workers",
        id="workers-neg",
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", "--csv", "{out}.csv"), "does not exist", id="csv-missing"
    ),
    pytest.param(
        ("sudoku", "--out", "{out}", "--csv", "{latin1}", "--size", "4"),
        "data.generate.size",
        id="csv-with-size-4",
    ),
    pytest.param(("sudoku", "--out", "{out}", "--csv", "{latin1}"), "UTF-8", id="csv-not-utf8"),
    pytest.param(
        ("sudoku", "--out", "{out}", "--csv", "{badheader}"), "header", id="csv-bad-header"
    ),
    pytest.param(("sudoku", "--out", "{out}", "--csv", "{badrow}"), "line 2", id="csv-bad-row"),
    pytest.param(("sudoku", "--out", "{out}", "--csv", "{empty}"), "0 puzzle rows", id="csv-empty"),
    pytest.param(
        ("sudoku", "--out", "{out}", "--csv", "{halfdir}"), "test.csv", id="csv-dir-no-test"
    ),
]


def _listing(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a folder)."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize(("args", "fragment"), BAD_INPUT)
def test_bad_input_gives_one_line_and_touches_nothing(cli, tmp_path, args, fragment):
    paths = _fixtures(tmp_path)
    before = _listing(tmp_path)
    result = cli("data", "build", *(a.format(**paths) for a in args))
    assert result.code == 2, result.err
    lines = error_lines(result.err)
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    assert fragment.format(**paths) in lines[0], lines[0]
    assert _listing(tmp_path) == before  # nothing written, no temporary folder left


def test_csv_errors_name_the_file(cli, tmp_path):
    paths = _fixtures(tmp_path)
    for name in ("latin1", "badheader", "badrow", "empty"):
        result = cli("data", "build", "sudoku", "--out", paths["out"], "--csv", paths[name])
        assert result.code == 2
        assert paths[name] in error_lines(result.err)[0]


def _build(cli, out: Path, *extra: str):
    return cli("data", "build", "sudoku", "--out", out, *TINY, *extra)


def test_force_on_a_folder_that_is_not_a_dataset_keeps_it(cli, tmp_path):
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_bytes(b"\\section{Intro}\n\x00\xff")
    before = _listing(tmp_path)
    result = _build(cli, folder, "--force")
    assert result.code == 2
    [line] = error_lines(result.err)
    assert str(folder) in line and "choose another --out" in line and "remove it" in line
    assert _listing(tmp_path) == before
    assert (folder / "chapter1.tex").read_bytes() == b"\\section{Intro}\n\x00\xff"


def test_ctrl_c_during_forced_rebuild_keeps_the_old_dataset(cli, tmp_path, monkeypatch):
    data = tmp_path / "data"
    assert _build(cli, data).code == 0
    before = _listing(tmp_path)
    assert before  # the dataset's files

    def interrupted(self, options, out_dir, seed, log):
        (Path(out_dir) / "train").mkdir(parents=True)
        (Path(out_dir) / "train" / "dataset.json").write_text("{half")
        raise KeyboardInterrupt

    monkeypatch.setattr(SudokuSource, "build", interrupted)
    result = _build(cli, data, "--force", "--seed", "1")
    assert result.code == 130
    assert "Traceback" not in result.err
    assert _listing(tmp_path) == before  # byte-identical, and no temporary folder beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_failed_forced_rebuild_keeps_the_old_dataset(cli, tmp_path, monkeypatch):
    data = tmp_path / "data"
    assert _build(cli, data).code == 0
    before = _listing(tmp_path)

    def broken(self, options, out_dir, seed, log):
        (Path(out_dir) / "partial.npy").write_bytes(b"x")
        raise RuntimeError("generator bug")

    monkeypatch.setattr(SudokuSource, "build", broken)
    result = _build(cli, data, "--force", "--seed", "1")
    assert result.code == 1
    assert _listing(tmp_path) == before


def test_forced_rebuild_replaces_the_dataset(cli, tmp_path):
    data = tmp_path / "data"
    assert _build(cli, data).code == 0
    before = _listing(data)
    result = _build(cli, data, "--force", "--seed", "7")
    assert result.code == 0, result.err
    after = _listing(data)
    assert after.keys() == before.keys() and after != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert open_split(data / "train").num_examples == 16
    assert open_split(data / "test").num_examples == 4


def test_forced_rebuild_of_an_empty_folder(cli, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    assert _build(cli, data).code == 0  # an empty folder needs no --force
    assert open_split(data / "test").num_examples == 4


def test_default_clues_depend_on_the_size(cli, tmp_path):
    data = tmp_path / "data"
    result = cli("data", "build", "sudoku", "--out", data, *TINY)
    assert result.code == 0, result.err
    inputs = np.load(data / "train" / "all__inputs.npy")
    assert (inputs > grid.BLANK_TOKEN).sum(axis=1).max() <= DEFAULT_CLUES[4]
    assert SudokuBuildOptions().clues == 0
    assert [max_clues(SudokuBuildOptions(size=s)) for s in (4, 6, 9)] == [6, 14, 30]
    assert max_clues(SudokuBuildOptions(size=4, clues=9)) == 9
    help_result = cli("data", "build", "sudoku", "--help")
    assert "0 = the size's default (4x4: 6, 6x6: 14, 9x9: 30)" in " ".join(help_result.out.split())


def test_is_solvable():
    source = SudokuSource()
    question, _ = generate_puzzle(np.random.default_rng(0), 4, 6)
    assert source.is_solvable(grid.encode(question).astype(np.int32))
    assert source.is_solvable(source.parse_puzzle("." * 16, 16))
    clash = np.zeros((4, 4), dtype=np.uint8)
    clash[0, 0] = clash[0, 1] = 1  # two equal givens in one row
    assert not source.is_solvable(grid.encode(clash).astype(np.int32))
    # No digit repeats, yet the top row's third cell has no candidate left.
    dead_end = source.parse_puzzle("12.. .... ..3. ..4.", 16)
    assert not source.is_solvable(dead_end)
