"""The demo page's ARC mode in a real browser, against a tiny ARC run trained here.

A task file is chosen through the page's file input, solved, and the grid the page shows is
checked against ``trm solve RUN_DIR TASK.json``'s first attempt (a task outside the dataset is
solved from its test input as given, under the blank puzzle identifier: one row, one vote, the
plain trajectory the page runs). The run is two steps of a very small model on a built dataset
of three tasks: what is tested is the page, not the model's skill. The static page has no ARC
mode to test: the arc source describes no ``cell_encoding``, so ``trm export --format onnx``
refuses ARC models (tested here too). One browser and one run a module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trm
from tests.conftest import assert_one_line_error
from tests.demo_page import browser_missing, chromium_path, open_page, press_solve, serving
from trm.plugins.demo.server import DemoServer
from trm.plugins.demo.session import PageSolver
from trm.plugins.tasks.arc import grids
from trm.plugins.tasks.arc.evaluator import NO_ANSWER
from trm.plugins.tasks.arc.source import ArcBuildOptions, ArcSource

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

SIDE = 8
ARC_SPEC = """\
name = "arc-demo-test"
[arch]
hidden_size = 16
expansion = 2.0
num_heads = 2
L_layers = 1
H_cycles = 1
L_cycles = 1
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 16
puzzle_emb_len = 1
halt_max_steps = 2
[train]
global_batch_size = 16
max_steps = 2
lr_warmup_steps = 1
[data]
source = "arc"
dir = "{data}"
[runtime]
device = "cpu"
precision = "fp32"
threads = 1
"""


def flipped_task(rng: np.random.Generator, tests: int = 1) -> dict:
    """An ARC task JSON whose outputs are its inputs flipped left-right (grids up to 5x5)."""
    pairs = []
    for _ in range(3 + tests):
        h, w = rng.integers(2, 6, size=2)
        grid = rng.integers(0, 4, size=(h, w))
        pairs.append({"input": grid.tolist(), "output": np.fliplr(grid).tolist()})
    return {"train": pairs[:3], "test": pairs[3:]}


@pytest.fixture(scope="module")
def arc_run(tmp_path_factory) -> Path:
    """Two steps of a tiny model on a dataset built from three training tasks and one
    evaluation task, six versions each, on an 8x8 canvas."""
    from trm.cli.main import main

    rng = np.random.default_rng(7)
    tasks = tmp_path_factory.mktemp("tasks")
    for subset, names in (("training", ["trn0", "trn1", "trn2"]), ("evaluation", ["evl0"])):
        chosen = {name: flipped_task(rng) for name in names}
        solutions = {name: [t["output"] for t in task["test"]] for name, task in chosen.items()}
        for task in chosen.values():
            for test in task["test"]:
                del test["output"]
        (tasks / f"arc-agi_{subset}_challenges.json").write_text(json.dumps(chosen))
        (tasks / f"arc-agi_{subset}_solutions.json").write_text(json.dumps(solutions))
    folder = tmp_path_factory.mktemp("arc")
    data = folder / "data"
    ArcSource().build(ArcBuildOptions(tasks=str(tasks), augment=6, side=SIDE), data, 0, print)
    spec = folder / "arc.toml"
    spec.write_text(ARC_SPEC.format(data=data))
    assert main(["run", str(spec), "--out", str(folder / "run")]) == 0
    return folder / "run"


@pytest.fixture(scope="module")
def model(arc_run):
    return trm.load(arc_run)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path())
        yield launched
        launched.close()


def shown_grid(page) -> list[list[int]] | None:
    """The answer grid the page draws, colour by colour (None: it draws no grid)."""
    cells = page.locator("#answer .grid .cell")
    if page.locator("#answer .grid[data-empty]").count():
        return None
    cols = int(page.get_attribute("#answer .grid", "data-cols"))
    colours = [int(c) for c in cells.evaluate_all("cs => cs.map(c => c.dataset.colour)")]
    return [colours[r : r + cols] for r in range(0, len(colours), cols)]


def test_a_task_file_chosen_on_the_served_page_gets_trm_solves_answer(
    browser, model, arc_run, tmp_path, cli
):
    task = flipped_task(np.random.default_rng(11))
    file = tmp_path / "fresh.json"
    file.write_text(json.dumps(task))
    with serving(DemoServer(PageSolver(model, "arc-tiny"), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        assert page.locator("#explore-label").is_hidden()  # ARC explores through trm solve
        page.set_input_files("#task-file", str(file))
        page.wait_for_selector("#editor .grid .cell")
        shown = press_solve(page)
        assert shown["state"] == "done", shown
        assert shown["steps"] == model.spec.arch.halt_max_steps
        grid = shown_grid(page)
        verdict = page.inner_text("#verdict")
    printed = cli("solve", arc_run, file, "--png", tmp_path / "fresh.png", "--json")
    assert printed.code == 0, printed.err
    document = json.loads(printed.out)
    assert document["in_dataset"] is False and document["rows"] == 1
    last = list(model.steps(file.read_text()))[-1]
    assert shown["cells"] == "".join(".#0123456789"[t] for t in last.tokens)
    decoded = grids.decode(last.tokens)
    # trm solve's first attempt is the plain answer's grid, or [[0]] when it holds none
    if decoded is None:
        assert grid is None and document["tests"][0]["attempt_1"] == NO_ANSWER
    else:
        assert grid == decoded.tolist() == document["tests"][0]["attempt_1"]
    assert "cannot judge" in verdict  # an unknown task's answer is not called wrong


def test_a_file_that_is_not_a_task_is_refused_on_the_page(browser, model, tmp_path):
    file = tmp_path / "not-a-task.json"
    file.write_text('{"train": []}')
    with serving(DemoServer(PageSolver(model, "arc-tiny"), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        page.set_input_files("#task-file", str(file))
        page.wait_for_function("document.getElementById('message').textContent !== ''")
        assert 'an ARC task holds {"train": [...], "test": [{"input": ...}]}' in page.inner_text(
            "#message"
        )
        refused = press_solve(page)
    assert refused["state"] == "error" and "Traceback" not in refused["message"]


def test_the_static_page_refuses_an_arc_model_in_one_line(arc_run, tmp_path, cli):
    result = cli("demo", "--static", tmp_path / "site", arc_run)
    assert_one_line_error(result, "--format onnx", "the arc task solves whole tasks")
    assert not (tmp_path / "site").exists()


def test_the_pages_crop_is_the_arc_sources_on_any_canvas(browser, model):
    """The page draws the grid ``grids.decode`` (trm solve's crop) finds, on answers from
    well-formed to garbage: the rows of an encoded grid with cells spoiled at random."""
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(200):
        h, w = rng.integers(1, SIDE + 1, size=2)
        tokens = grids.encode(rng.integers(0, 10, size=(h, w)), side=SIDE).astype(np.int64)
        spoiled = rng.random(tokens.size) < rng.choice([0.0, 0.05, 0.3])
        tokens[spoiled] = rng.integers(0, 12, size=int(spoiled.sum()))
        rows.append(tokens)
    with serving(DemoServer(PageSolver(model, "arc-tiny"), "127.0.0.1", 0)) as url:
        page = open_page(browser, url)
        shapes = page.evaluate(
            """async ([card, rows]) => {
                const { makeCodec } = await import("./codec.js");
                const codec = makeCodec(card);
                return rows.map((tokens) => codec.arcGridShape(tokens));
            }""",
            [PageSolver(model, "arc-tiny").card, [r.tolist() for r in rows]],
        )
    expected = [grids.decode(r) for r in rows]
    assert shapes == [
        None if g is None else {"rows": g.shape[0], "cols": g.shape[1]} for g in expected
    ]
    assert any(g is None for g in expected) and any(g is not None and g.size > 1 for g in expected)
