"""trm demo: Model.steps, the served page's API and the command's bad input (no browser:
tests/test_demo_browser.py drives the page in Chromium)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

import trm
from tests.conftest import assert_one_line_error
from tests.demo_page import serving
from trm.errors import TrmError
from trm.plan.dataset import find_data_source
from trm.plugin_manager import load_plugins
from trm.plugins.demo.server import DemoServer
from trm.plugins.demo.session import PageSolver
from trm.plugins.demo.vocab import page_encoding

# A 4x4 Sudoku the quickstart model solves.
PUZZLE_4 = "1...|..3.|.2..|...4"


@pytest.fixture(scope="module")
def quickstart():
    return trm.load("quickstart")


@pytest.fixture(scope="module")
def served(quickstart):
    with serving(DemoServer(PageSolver(quickstart, "quickstart"), "127.0.0.1", 0)) as url:
        yield url


def _post(url: str, body: bytes) -> tuple[int, list[dict]]:
    request = urllib.request.Request(url + "api/solve", data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, [json.loads(line) for line in response.read().splitlines()]
    except urllib.error.HTTPError as exc:
        return exc.code, [json.loads(exc.read())]


def test_model_steps_end_with_the_answer_solve_gives(quickstart):
    steps = list(quickstart.steps(PUZZLE_4))
    solution = quickstart.solve(PUZZLE_4)
    assert [s.step for s in steps] == list(range(1, quickstart.spec.arch.halt_max_steps + 1))
    assert np.array_equal(steps[-1].tokens, solution.tokens)
    assert steps[-1].cells == solution.answer_cells
    question = solution.question
    assert steps[0].changed == tuple(np.flatnonzero(steps[0].tokens != question))
    for before, after in itertools.pairwise(steps):
        assert after.changed == tuple(np.flatnonzero(after.tokens != before.tokens))
    assert solution.valid and steps[-1].valid
    for s in steps:
        assert s.halt_score == pytest.approx(1 / (1 + np.exp(-s.q_halt)))
        assert s.valid == quickstart.source.check_answer(question, s.tokens)


def test_model_steps_refuses_a_puzzle_of_another_size_before_any_step(quickstart):
    with pytest.raises(TrmError, match=r"quickstart solves 4x4 Sudoku \(16 cells\)"):
        quickstart.steps("." * 81)


def test_served_page_streams_every_step_then_the_end(served, quickstart):
    status, events = _post(served, json.dumps({"puzzle": PUZZLE_4}).encode())
    assert status == 200
    steps, done = events[:-1], events[-1]
    assert [e["kind"] for e in steps] == ["step"] * quickstart.spec.arch.halt_max_steps
    assert done["kind"] == "done"
    assert done["cells"] == quickstart.solve(PUZZLE_4).answer_cells
    assert done["halt_step"] == quickstart.solve(PUZZLE_4).steps
    assert "explored" not in done


def test_served_page_shows_the_trajectories_explored(served, quickstart):
    _, events = _post(served, json.dumps({"puzzle": PUZZLE_4, "explore": 3}).encode())
    explored = events[-1]["explored"]
    solution = quickstart.solve(PUZZLE_4, explore=3)
    assert len(explored["trajectories"]) == 3
    assert [t["chosen"] for t in explored["trajectories"]] == [
        t.chosen for t in solution.trajectories
    ]
    assert explored["cells"] == solution.answer_cells


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (json.dumps({"puzzle": "." * 81}), "quickstart solves 4x4 Sudoku (16 cells)"),
        (json.dumps({"puzzle": "11.............."}), "digit 1 appears twice in row 1"),
        (json.dumps({"puzzle": ""}), "the puzzle is empty"),
        (json.dumps({"puzzle": PUZZLE_4, "explore": 0}), "explore must be 1 to 64"),
        (json.dumps(["not", "an", "object"]), "must be a JSON object"),
        ("{not json", "is not JSON"),
    ],
)
def test_served_page_answers_a_bad_request_with_one_message(served, body, message):
    status, events = _post(served, body.encode())
    assert status == 400
    assert events == [{"kind": "error", "message": events[0]["message"]}]
    assert message in events[0]["message"]
    assert "Traceback" not in events[0]["message"]


def test_served_page_serves_its_files_and_the_card_only(served):
    with urllib.request.urlopen(served, timeout=30) as response:
        assert b'src="demo.js"' in response.read()
    with urllib.request.urlopen(served + "trm-demo.json", timeout=30) as response:
        card = json.loads(response.read())
    assert (card["task"], card["seq_len"]) == ("sudoku", 16)
    assert card["grid"] == {"rows": 4, "cols": 4, "box": {"rows": 2, "cols": 2}}
    for missing in ("../pyproject.toml", "%2e%2e/server.py", "nothing.js", "server.py"):
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(served + missing, timeout=30)
        assert error.value.code == 404


@pytest.mark.parametrize(
    ("task", "seq_len", "text", "cells"),
    [
        ("sudoku", 16, "1..4..1..3..4..2", {"1": 0, ".": 1, "4": 3}),
        ("sudoku", 81, "9" + "." * 80, {"9": 0, ".": 1}),
        ("maze", 9, "S #\n   \n# G", {"S": 0, "#": 2, " ": 1, "G": 8}),
    ],
)
def test_the_page_vocab_is_the_sources_encoding(task, seq_len, text, cells):
    source = find_data_source(load_plugins(()), task)
    tokens = source.parse_puzzle(text, seq_len)
    vocab = page_encoding(source, seq_len)["vocab"]
    named = {".": "blank", "#": "wall", " ": "open", "S": "start", "G": "goal"}
    for char, index in cells.items():
        expected = vocab["digits"][char] if char.isdigit() else vocab[named[char]]
        assert tokens[index] == expected, (char, index)


def test_the_page_vocab_is_the_arc_sources_encoding():
    source = find_data_source(load_plugins(()), "arc")
    tokens = source.parse_puzzle("[[3, 0], [9, 1]]", 16).reshape(4, 4)
    vocab = page_encoding(source, 16)["vocab"]
    colours = vocab["colours"]
    assert tokens[:2, :2].tolist() == [[colours["3"], colours["0"]], [colours["9"], colours["1"]]]
    assert (
        tokens[2, :2].tolist() == [vocab["eos"]] * 2
        and tokens[:2, 2].tolist() == [vocab["eos"]] * 2
    )
    assert tokens[3, 3] == vocab["pad"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--port", "70000"], ["--port", "65535"]),
        (["--port", "eight"], ["--port", "expected a port number"]),
        (["--host", ""], ["--host", "expected an address"]),
        (["no-such-model"], ["no-such-model", "quickstart"]),
    ],
)
def test_demo_refuses_bad_command_lines_in_one_line(cli, args, fragments):
    assert_one_line_error(cli("demo", *args), *fragments)


def test_demo_static_refuses_an_existing_folder_and_writes_nothing(cli, tmp_path):
    (tmp_path / "site").mkdir()
    assert_one_line_error(cli("demo", "--static", tmp_path / "site", "quickstart"), "exists")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    assert not any((tmp_path / "site").iterdir())


def test_demo_static_without_the_onnx_format_says_so_and_writes_nothing(cli, tmp_path):
    result = cli("demo", "--plugins", "no:onnx", "--static", tmp_path / "site", "quickstart")
    assert_one_line_error(result, "--static needs the onnx model format")
    assert list(tmp_path.iterdir()) == []


def test_trm_demo_prints_its_url_and_serves_the_page(tmp_path):
    command = [sys.executable, "-m", "trm", "demo", "quickstart", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("trm demo: quickstart at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].strip()
        with urllib.request.urlopen(url + "trm-demo.json", timeout=30) as response:
            assert json.loads(response.read())["model"]["name"] == "quickstart"
    finally:
        process.terminate()
        process.communicate(timeout=30)
