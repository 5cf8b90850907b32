"""benchmarks/memory_accuracy.py --repredict: a saved document's measurements scored against
this checkout's estimator (how an estimator change is checked against a machine not at hand)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def accuracy():
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(
        "bench_memory_accuracy", BENCHMARKS / "memory_accuracy.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_repredicting_keeps_the_measurements_and_scores_todays_estimate(accuracy):
    label = accuracy.GRID[1][0]
    config = accuracy.row_config(1, "cpu")
    today, _items = accuracy.predicted_bytes(config, reuse=True)
    saved = {
        "device": "cpu",
        "rows": [
            {"label": label, "precision": "fp32", "predicted_bytes": 1, "error": -0.5,
             "measured_bytes": 2 * today, "host_memory_reuse": True},
            {"label": "a row no longer in the grid", "predicted_bytes": 1, "error": 0.0,
             "measured_bytes": 1},
            {"label": label, "measured_bytes": None, "error": "failed"},
        ],
        "provenance": {"commit": "abc"},
    }  # fmt: skip
    document = accuracy.repredicted(saved, "saved.json")
    (row,) = document["rows"]
    assert row["measured_bytes"] == 2 * today and row["predicted_bytes"] == today
    assert row["error"] == pytest.approx(-0.5)
    assert row["saved_predicted_bytes"] == 1 and row["saved_error"] == -0.5
    assert document["within_goal"] == 0 and document["total"] == 1
    assert document["repredicted_from"] == {"file": "saved.json", "provenance": {"commit": "abc"}}


def test_the_saved_amx_document_repredicts(accuracy):
    path = BENCHMARKS / "results" / "memory-accuracy-xeon-amx.json"
    document = accuracy.repredicted(json.loads(path.read_text()), str(path))
    assert document["total"] == len(
        [r for r in json.loads(path.read_text())["rows"] if r.get("measured_bytes")]
    )
