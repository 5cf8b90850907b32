"""docs/notebooks/quickstart.ipynb runs top to bottom under a real Jupyter kernel (nbclient,
the ``python3`` kernel of this interpreter), and is kept in the repository without outputs.

The cells tagged ``shipped-model`` load the shipped 9x9 model; they are left out only while
``sudoku9-laptop`` is not among the shipped models (``trm.shipped.shipped_names()``): the 9x9
model is trained and shipped separately from the code that loads it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from trm.shipped import shipped_names

# The notebook trains the quickstart under a kernel: slow, so run first under pytest -n.
pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT_S = 480  # the training cell is the longest
SHIPPED_TAG = "shipped-model"
SHIPPED_MODEL = "sudoku9-laptop"
SHIPPED_MISSING = SHIPPED_MODEL not in shipped_names()
# The training cell's MAX_STEPS as the test runs it: the quickstart's first evaluation (its
# eval_interval is 100), so the cells after it read a run with a checkpoint, training rows and
# one evaluation row, as they do at the notebook's own 400 steps, in a quarter of the time.
# TRM_NOTEBOOK_MAX_STEPS sets another whole number of steps, or "notebook" to run the cell
# exactly as it is in the repository.
TEST_MAX_STEPS = 100
MAX_STEPS_ENV = "TRM_NOTEBOOK_MAX_STEPS"


def _tags(cell: nbformat.NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> nbformat.NotebookNode:
    """The notebook executed in a fresh folder (its run directory lands there)."""
    folder = tmp_path_factory.mktemp("notebook")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    if SHIPPED_MISSING:
        notebook.cells = [c for c in notebook.cells if SHIPPED_TAG not in _tags(c)]
    steps = os.environ.get(MAX_STEPS_ENV) or str(TEST_MAX_STEPS)
    if steps != "notebook":
        (training,) = [c for c in notebook.cells if re.search(r"^MAX_STEPS = ", c.source, re.M)]
        training.source = re.sub(
            r"^MAX_STEPS = .*$", f"MAX_STEPS = {int(steps)}", training.source, flags=re.M
        )
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    shutil.rmtree(folder / "runs", ignore_errors=True)
    return notebook


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
    return "".join(parts)


def test_the_notebook_runs_top_to_bottom_under_a_kernel(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    training = next(c for c in code if "trm.train(" in c.source)
    assert "best exact accuracy on held-out puzzles" in _text(training)
    assert re.search(r"held-out puzzles: \d+\.\d%", _text(training))  # it reached an evaluation
    live = [o for o in training.outputs if o.output_type == "display_data"]
    assert live and "text/html" in live[0].data  # the progress bar, refreshed in place
    plots = [c for c in code if "plt.subplots(1, 2" in c.source]
    assert any("image/png" in o.get("data", {}) for o in plots[0].outputs)
    solved = next(c for c in code if "model.solve(" in c.source)
    assert "valid solution:" in _text(solved) and "supervision steps used" in _text(solved)


@pytest.mark.skipif(
    SHIPPED_MISSING,
    reason=f"{SHIPPED_MODEL} is not among the shipped models (trm.shipped.shipped_names(); "
    "the 9x9 model is not trained yet): the notebook ran without its shipped-model cells",
)
def test_the_shipped_model_solves_the_hard_puzzle_in_the_notebook(executed):
    cell = next(c for c in executed.cells if "sudoku9-laptop" in c.source and c.cell_type == "code")
    assert "valid solution: yes" in _text(cell)


def test_the_notebook_is_kept_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    tagged = [c for c in notebook.cells if SHIPPED_TAG in _tags(c)]
    assert any('trm.load("sudoku9-laptop")' in c.source for c in tagged)
