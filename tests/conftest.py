"""Shared fixtures: a CLI runner that captures exit code, stdout and stderr."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trm.cli.main import main


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def cli(capsys):
    """Run ``trm ARGS…`` in process; returns CliResult(code, out, err)."""

    def run(*args: str | Path) -> CliResult:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("trm: error:")]


def assert_one_line_error(result: CliResult, *fragments: str) -> None:
    """Exit code 2, exactly one ``trm: error:`` line holding every fragment, no traceback."""
    assert result.code == 2, (result.code, result.err)
    lines = error_lines(result.err)
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def pytest_configure(config: pytest.Config) -> None:
    """No test reads or writes the user's compile ledger (``TRM_COMPILE_LEDGER=off``; the
    tests of the ledger name their own file), so a small network's compile decision is the
    same in every test, whatever ran before.

    Under pytest-xdist (``pytest -n N``), give each worker its own share of the CPUs.

    Worker ``i`` of ``N`` keeps every ``N``-th usable CPU from the ``i``-th, so workers (and the
    ``trm`` and torchrun processes they start, which inherit the mask) never fight over a core:
    trm's CPU backend takes its thread count from this mask. With more workers than CPUs the
    mask is left alone.
    """
    os.environ["TRM_COMPILE_LEDGER"] = "off"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or workers < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if workers > len(cpus):
        return
    mine = cpus[int(worker[2:]) % workers :: workers]
    os.sched_setaffinity(0, mine)
    import torch

    torch.set_num_threads(len(mine))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests marked ``slow`` first (in their collected order), so that under
    ``pytest -n`` the long ones start early and the short ones fill in around them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--activation-checkpointing",
        action="store_true",
        help="build every TinyRecursiveModel with activation checkpointing on (to run the "
        "model's equivalence tests with it: pytest tests/test_model.py --activation-checkpointing)",
    )


@pytest.fixture(autouse=True)
def _activation_checkpointing_everywhere(request: pytest.FixtureRequest, monkeypatch) -> None:
    """With ``--activation-checkpointing``, every model the test builds recomputes its
    activations in backward."""
    if not request.config.getoption("--activation-checkpointing"):
        return
    from trm.model.trm import TinyRecursiveModel

    built = TinyRecursiveModel.__init__

    def build_recomputing(self, *args, **kwargs) -> None:
        built(self, *args, **kwargs)
        self.set_activation_checkpointing(True)

    monkeypatch.setattr(TinyRecursiveModel, "__init__", build_recomputing)
