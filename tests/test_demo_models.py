"""``trm demo MODEL`` for every kind of MODEL: a run directory, a checkpoint file, a model
folder ``trm export --format hf`` wrote and a shipped model's name each serve the page's card
and answer a puzzle as :meth:`trm.Model.solve` does; a MODEL that is none of them is one
``trm: error:`` line, exit 2 (no browser: the server's card and solve addresses)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

import trm
from tests.conftest import assert_one_line_error
from tests.demo_page import serving
from tests.tiny_run import build_tiny_data, write_spec
from trm.cli.main import main
from trm.plugins.demo.demo_cmd import page_model, page_server

# A 4x4 Sudoku, as the tiny run and the quickstart model solve them.
PUZZLE_4 = "1...|..3.|.2..|...4"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """Two steps of the tiny 4x4 run, its last checkpoint file and its hf export."""
    base = tmp_path_factory.mktemp("demo_models")
    data = build_tiny_data(base / "data")
    run_dir = base / "run"
    assert main(["run", str(write_spec(base, data, max_steps=2)), "--out", str(run_dir)]) == 0
    (checkpoint,) = sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1:]
    folder = base / "exported"
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(folder)]) == 0
    return SimpleNamespace(run=run_dir, checkpoint=checkpoint, folder=folder)


def served_card_and_answer(model: str) -> tuple[dict, dict]:
    """The card ``trm demo MODEL``'s page reads and the end of its answer to PUZZLE_4."""
    loaded, name = page_model(model, ())
    with serving(page_server(loaded, name, "127.0.0.1", 0)) as url:
        with urllib.request.urlopen(url + "trm-demo.json", timeout=30) as response:
            card = json.loads(response.read())
        request = urllib.request.Request(
            url + "api/solve", data=json.dumps({"puzzle": PUZZLE_4}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            done = json.loads(response.read().splitlines()[-1])
    return card, done


def assert_card_of(card: dict, done: dict, model: str | Path, name: str) -> None:
    assert (card["task"], card["seq_len"], card["solver"]) == ("sudoku", 16, "server")
    assert card["model"]["name"] == name
    assert card["steps"] == trm.load(model).spec.arch.halt_max_steps
    assert done["kind"] == "done"
    assert done["cells"] == trm.load(model).solve(PUZZLE_4).answer_cells


def test_a_run_directory(tiny):
    card, done = served_card_and_answer(str(tiny.run))
    assert_card_of(card, done, tiny.run, str(tiny.run))
    assert card["puzzle"] == "4x4 sudoku puzzles"


def test_a_checkpoint_file(tiny):
    card, done = served_card_and_answer(str(tiny.checkpoint))
    assert_card_of(card, done, tiny.checkpoint, str(tiny.checkpoint))
    assert card["model"]["source"] == str(tiny.checkpoint)


def test_an_exported_hf_folder(tiny):
    card, done = served_card_and_answer(str(tiny.folder))
    assert_card_of(card, done, tiny.folder, str(tiny.folder))


def test_a_shipped_models_name():
    card, done = served_card_and_answer("quickstart")
    assert_card_of(card, done, "quickstart", "quickstart")
    assert card["puzzle"] == trm.load("quickstart").manifest.puzzle


def bad_model(tmp_path: Path, kind: str) -> Path:
    """A MODEL argument that names no model: a missing path, an empty folder, a text file."""
    path = tmp_path / "m"
    if kind == "empty folder":
        path.mkdir()
    elif kind == "text file":
        path.write_text("not a model")
    return path


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        ("missing path", "quickstart"),  # the shipped models' names are listed
        ("empty folder", "no checkpoint found"),
        ("text file", "is not a PyTorch checkpoint"),
    ],
)
def test_a_model_that_is_none_of_them_is_one_line(cli, tmp_path, kind, fragment):
    result = cli("demo", bad_model(tmp_path, kind), "--port", "0")
    assert_one_line_error(result, str(tmp_path / "m"), fragment)
    assert result.out == ""
