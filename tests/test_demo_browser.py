"""The demo page in a real browser: Playwright driving Debian's headless Chromium.

The served page (``trm demo``) and the static page (``trm demo --static``, served from a
temporary folder by a plain static file server) are opened, given a puzzle, and their answer
is checked against ``trm solve``'s (:meth:`trm.Model.solve`, which ``trm solve`` prints).
Skipped, saying why, where Playwright or Chromium is missing, and (the static page) where no
plugin offers the ``onnx`` model format. One browser a module.
"""

from __future__ import annotations

import numpy as np
import pytest

import trm
from tests.demo_page import (
    browser_missing,
    chromium_path,
    open_page,
    serving,
    solve_on_page,
    static_server,
)
from trm.formats import model_formats
from trm.plan.dataset import find_data_source
from trm.plugin_manager import load_plugins
from trm.plugins.demo.server import DemoServer
from trm.plugins.demo.session import PageSolver
from trm.plugins.demo.static import write_static

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

MODEL = "sudoku9-laptop"
# The seed of the fresh puzzles: the model trained on seed 0's and was measured on seed 1's.
FRESH_SEED = 47
FRESH_COUNT = 20


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path())
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def model():
    return trm.load(MODEL)


def fresh_puzzles(count: int) -> list[str]:
    """``count`` 9x9 puzzles of the sudoku task's generator (30 clues, as the model's "30
    clues" measurement) from a seed not used in training, as text."""
    from trm.plugins.tasks.sudoku.generator import generate_many

    questions, _ = generate_many(count, 9, 30, seed=FRESH_SEED, workers=1)
    return ["".join(str(int(d)) if d else "." for d in q.ravel()) for q in questions]


@pytest.mark.slow
def test_served_page_shows_each_step_and_the_answer_trm_solve_gives(browser, model):
    puzzle = fresh_puzzles(1)[0]
    with serving(DemoServer(PageSolver(model, MODEL), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        shown = solve_on_page(page, puzzle)
        assert shown["state"] == "done", shown
        assert shown["cells"] == model.solve(puzzle).answer_cells
        assert shown["steps"] == model.spec.arch.halt_max_steps
        page.fill("#explore", "4")
        page.click("#solve")
        page.wait_for_selector("#explored:not([hidden])", timeout=60_000)
        assert page.locator("#explored tbody tr").count() == 4
        chosen = page.get_attribute("#explored-answer", "data-cells")
        assert chosen == model.solve(puzzle, explore=4).answer_cells
        page.fill("#explore", "1")
        refused = solve_on_page(page, "1..4..1..3..4..2")
        assert refused["state"] == "error"
        assert "sudoku9-laptop solves 9x9 Sudoku (81 cells)" in refused["message"]
        assert "Traceback" not in refused["message"]


@pytest.fixture(scope="module")
def static_url(model, tmp_path_factory):
    pm = load_plugins(())
    if "onnx" not in {fmt.name for fmt in model_formats(pm)}:
        pytest.skip("no enabled plugin offers the onnx model format (trm export --format onnx)")
    folder = tmp_path_factory.mktemp("static") / "site"
    write_static(model, MODEL, folder, pm)
    with serving(static_server(folder)) as url:
        yield url


@pytest.mark.slow
def test_static_page_solves_fresh_puzzles_as_trm_solve_does(browser, model, static_url):
    """The must-show: 20 fresh puzzles, every answer the page shows equal to trm solve's."""
    requests: list[str] = []
    page = open_page(browser, static_url, requests)
    puzzles = fresh_puzzles(FRESH_COUNT)
    for puzzle in puzzles:
        shown = solve_on_page(page, puzzle)
        assert shown["state"] == "done", shown
        assert shown["steps"] == model.spec.arch.halt_max_steps
        assert shown["cells"] == model.solve(puzzle).answer_cells, puzzle
    assert any(url.endswith("ort-wasm-simd-threaded.wasm") for url in requests)
    assert all(url.startswith(static_url) for url in requests), requests
    refused = solve_on_page(page, "1..4..1..3..4..2")
    assert refused["state"] == "error" and "9x9 Sudoku (81 cells)" in refused["message"]


def _candidate_answers(
    question: np.ndarray, label: np.ndarray, rng: np.random.Generator, path: int
):
    """The label and a few answers near it: one path cell dropped, one added, cells swapped."""
    answers = [label]
    on_path = np.flatnonzero(label == path)
    if on_path.size:
        dropped = label.copy()
        dropped[rng.choice(on_path)] = 2  # an open cell
        answers.append(dropped)
    added = label.copy()
    added[rng.integers(label.size)] = path
    answers.append(added)
    answers.append(rng.permutation(label))
    return answers


def test_the_pages_rules_judge_answers_as_the_task_sources_do(browser, model):
    """The static page checks answers in JavaScript (codec.js); on Sudoku and mazes its verdict
    is the data source's ``check_answer`` on every answer tried."""
    from trm.plugins.tasks.maze import grid as maze_grid
    from trm.plugins.tasks.sudoku.generator import generate_many

    pm = load_plugins(())
    cases = []
    sudoku = find_data_source(pm, "sudoku")
    questions, solutions = generate_many(6, 9, 30, seed=FRESH_SEED, workers=1)
    rng = np.random.default_rng(FRESH_SEED)
    for q, s in zip(questions, solutions, strict=True):
        question, label = q.ravel().astype(np.int64) + 1, s.ravel().astype(np.int64) + 1
        swapped = label.copy()
        swapped[[0, 1]] = swapped[[1, 0]]
        blanked = label.copy()
        blanked[rng.integers(81)] = 1
        for answer in (label, swapped, blanked, question):
            cases.append(("sudoku", 81, question, answer, sudoku))
    maze = find_data_source(pm, "maze")
    for _ in range(12):
        cells = np.where(rng.random(64) < 0.3, maze_grid.WALL, maze_grid.OPEN)
        start, goal = rng.choice(64, size=2, replace=False)
        cells[start], cells[goal] = maze_grid.START, maze_grid.GOAL
        question = cells.astype(np.int64)
        if maze_grid.shortest_distance(question) is None:
            continue
        label = maze_grid.label_of(question).astype(np.int64)
        for answer in _candidate_answers(question, label, rng, maze_grid.PATH):
            cases.append(("maze", 64, question, answer, maze))
    assert sum(case[0] == "maze" for case in cases) >= 8
    with serving(DemoServer(PageSolver(model, MODEL), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        judged = page.evaluate(
            """async (cases) => {
                const { makeCodec } = await import("./codec.js");
                return cases.map(([card, question, answer]) =>
                    makeCodec(card).obeysRules(question, answer));
            }""",
            [
                [
                    {
                        "task": task,
                        "seq_len": n,
                        "grid": source.cell_encoding(n)["grid"],
                        "vocab": source.cell_encoding(n)["vocab"],
                    },
                    question.tolist(),
                    answer.tolist(),
                ]
                for task, n, question, answer, source in cases
            ],
        )
    expected = [bool(source.check_answer(q, a)) for _, _, q, a, source in cases]
    assert judged == expected
    for task in ("sudoku", "maze"):  # each task's rules both accept and refuse here
        verdicts = {e for e, case in zip(expected, cases, strict=True) if case[0] == task}
        assert verdicts == {True, False}, task
