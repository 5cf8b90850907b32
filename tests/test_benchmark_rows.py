"""Benchmarks that call the training step directly keep working when its signature changes.

benchmarks/activation_checkpointing.py measures each row in a child process that calls
``trm.loop.step.accumulate_gradients`` itself; when that function began to take a
``placement`` instead of a ``device``, every row of the benchmark turned into an error line
and no test noticed. These run one real row of each such benchmark, as small as it goes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _benchmark(name: str):
    if str(BENCHMARKS) not in sys.path:  # as when run as a script: ``tables`` by name
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("setting", ["off", "on"])
def test_an_activation_checkpointing_row_trains_and_is_estimated(setting):
    bench = _benchmark("activation_checkpointing")
    row = bench.run_row("sudoku", 1, setting, 2)
    assert "error" not in row, row.get("error")
    assert row["samples_per_s"] > 0 and len(row["step_s"]) == 2
    assert row["peak_rss_bytes"] > row["baseline_bytes"] > 0
    assert row["estimate_bytes"] > 0 and row["checkpointing"] == setting
