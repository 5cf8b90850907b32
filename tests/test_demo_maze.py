"""The demo page's maze mode in a real browser, against a tiny maze run trained here.

A maze is drawn on the page with its tools (wall, start, goal: a click a cell, as a person
draws), solved, and the answer the page shows is checked against ``trm solve RUN_DIR MAZE``'s
(:meth:`trm.Model.solve`), its verdict against the maze source's ``check_answer``: on the
served page (``trm demo RUN_DIR``) and on the static page (``trm demo --static DIR RUN_DIR``,
the model's ONNX solver in the browser). The run is a few steps of a very small model: what is
tested is the page, not the model's skill, though it finds a shortest path in a few fresh mazes
in twenty, so the page shows both verdicts. One browser and one run a module.
"""

from __future__ import annotations

import json

import pytest

import trm
from tests.demo_page import (
    browser_missing,
    chromium_path,
    draw_maze,
    open_page,
    press_solve,
    serving,
    static_server,
)
from trm.formats import model_formats
from trm.plugin_manager import load_plugins
from trm.plugins.demo.server import DemoServer
from trm.plugins.demo.session import PageSolver
from trm.plugins.demo.static import write_static
from trm.plugins.tasks.maze import grid as maze_grid

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

SIZE = 5
# 150 optimizer steps of a model small enough to train in seconds on one core.
MAZE_SPEC = f"""\
name = "maze-demo-test"
[arch]
hidden_size = 32
expansion = 2.0
num_heads = 2
L_layers = 1
H_cycles = 1
L_cycles = 1
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 0
puzzle_emb_len = 1
halt_max_steps = 2
[train]
global_batch_size = 16
max_steps = 150
lr = 3e-3
lr_warmup_steps = 1
eval_max_examples = 16
[data]
source = "maze"
[data.generate]
preset = ""
size = {SIZE}
min_walls = 3
max_walls = 6
min_path = 2
count = 512
test_count = 16
[runtime]
device = "cpu"
precision = "fp32"
threads = 1
"""
# The seed of the mazes drawn (the run generated its own from seed 0), and how many are tried
# for one the tiny model solves (it solves 11 of these 200 on a Zen 3 EPYC).
FRESH_SEED = 47
FRESH_COUNT = 200


@pytest.fixture(scope="module")
def maze_run(tmp_path_factory):
    from trm.cli.main import main

    folder = tmp_path_factory.mktemp("maze")
    spec = folder / "maze.toml"
    spec.write_text(MAZE_SPEC)
    assert main(["run", str(spec), "--out", str(folder / "run")]) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def model(maze_run):
    return trm.load(maze_run)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path())
        yield launched
        launched.close()


def fresh_mazes(count: int) -> list[str]:
    """``count`` generated 5x5 mazes with walls, as lines of text (no path drawn)."""
    from trm.plugins.tasks.maze.generator import MazeParams, generate_many

    questions, _ = generate_many(count, MazeParams(SIZE, 3, 6, 2), seed=FRESH_SEED, workers=1)
    return [maze_grid.render(q) for q in questions]


@pytest.fixture(scope="module")
def mazes(model) -> dict[bool, str]:
    """A fresh maze the model solves (True) and one it does not (False)."""
    found: dict[bool, str] = {}
    for maze in fresh_mazes(FRESH_COUNT):
        found.setdefault(model.solve(maze).valid, maze)
        if len(found) == 2:
            break
    assert set(found) == {True, False}, f"the tiny run's {FRESH_COUNT} answers are all {found}"
    return found


def assert_page_answers_as_trm_solve(shown: dict, model, maze: str) -> None:
    """The page's answer is ``Model.solve``'s; its verdict the maze source's checker's."""
    assert shown["state"] == "done", shown
    solution = model.solve(maze)
    assert shown["cells"] == solution.answer_cells, maze
    assert shown["steps"] == model.spec.arch.halt_max_steps
    answer = maze_grid.chars_to_tokens(solution.answer_cells)
    checked = bool(model.source.check_answer(solution.question, answer))
    assert shown["verdict"] == ("valid" if checked else "invalid")
    rules = "obeys the rules" if checked else "breaks the rules"
    assert rules in shown["status"]


def test_mazes_drawn_on_the_served_page_get_trm_solves_answers(
    browser, model, maze_run, mazes, cli
):
    with serving(DemoServer(PageSolver(model, str(maze_run)), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        for valid in (True, False):
            page.click("#clear")
            draw_maze(page, mazes[valid])
            shown = press_solve(page)
            assert_page_answers_as_trm_solve(shown, model, mazes[valid])
            assert shown["verdict"] == ("valid" if valid else "invalid")
            printed = cli("solve", maze_run, mazes[valid], "--json")
            assert printed.code == 0, printed.err
            assert json.loads(printed.out)["answer_cells"] == shown["cells"]


def test_a_second_start_moves_the_start_and_a_maze_without_a_goal_is_refused(browser, model):
    with serving(DemoServer(PageSolver(model, "maze"), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        page.get_by_label("start", exact=True).check()
        page.click('#editor .grid [data-index="0"]')
        page.click('#editor .grid [data-index="6"]')
        starts = page.locator("#editor .grid .start")
        assert starts.count() == 1
        assert starts.first.get_attribute("data-index") == "6"
        refused = press_solve(page)
    assert refused["state"] == "error"
    assert "maze has no G (goal)" in refused["message"]
    assert "Traceback" not in refused["message"]


@pytest.fixture(scope="module")
def static_url(model, maze_run, tmp_path_factory):
    pm = load_plugins(())
    if "onnx" not in {fmt.name for fmt in model_formats(pm)}:
        pytest.skip("no enabled plugin offers the onnx model format (trm export --format onnx)")
    folder = tmp_path_factory.mktemp("static") / "site"
    write_static(model, str(maze_run), folder, pm)
    with serving(static_server(folder)) as url:
        yield url


def test_mazes_drawn_on_the_static_page_get_trm_solves_answers(browser, model, mazes, static_url):
    page = open_page(browser, static_url)
    for maze in [mazes[True], mazes[False], *fresh_mazes(3)]:
        page.click("#clear")
        draw_maze(page, maze)
        shown = press_solve(page)
        assert_page_answers_as_trm_solve(shown, model, maze)
    assert page.locator("#explore-label").is_hidden()
