"""``--attempts K`` at ``trm solve``, ``trm eval``, ``Model.solve(attempts=K)`` and
``train.eval_attempts``: one attempt gives exactly the answers and figures of a plain call;
more report the exact accuracy of one attempt and of K side by side; a puzzle the model
fails as given is tried again and accepted; bad counts are one-line errors."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import trm
from tests.conftest import assert_one_line_error
from tests.tiny_run import build_tiny_data, metrics, write_spec
from trm.cli.main import main
from trm.plugins.tasks.sudoku import grid
from trm.plugins.tasks.sudoku.solver import solve

PUZZLE = "1... .... ..4. ...."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A tiny 4x4 Sudoku run of a few steps, evaluated with 3 attempts while it trains."""
    base = tmp_path_factory.mktemp("attempts_tiny")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, max_steps=5, eval_interval=5, eval_attempts=3)
    assert main(["run", str(spec), "--out", str(base / "run")]) == 0
    newest = sorted(glob.glob(str(base / "run" / "checkpoints" / "step-*.pt")))[-1]
    return SimpleNamespace(base=base, spec=spec, run=base / "run", checkpoint=Path(newest))


def test_one_attempt_gives_exactly_the_plain_answers_and_figures(tiny, cli):
    plain = cli("solve", tiny.run, PUZZLE, "--json")
    once = cli("solve", tiny.run, PUZZLE, "--json", "--attempts", "1")
    assert plain.code == once.code == 0 and once.out == plain.out
    assert (
        cli("solve", tiny.run, PUZZLE, "--attempts", "1").out == cli("solve", tiny.run, PUZZLE).out
    )
    model = trm.load(tiny.run)
    assert model.solve(PUZZLE, attempts=1).document() == model.solve(PUZZLE).document()
    plain = cli("eval", tiny.run, "--json")
    once = cli("eval", tiny.run, "--json", "--attempts", "1")
    assert plain.code == once.code == 0 and untimed(once.out) == untimed(plain.out)


def untimed(out: str) -> dict:
    """An evaluation's JSON document without its wall time (the one field that differs)."""
    document = json.loads(out)
    document.pop("seconds_per_puzzle")
    return document


def test_one_attempt_of_a_shipped_model_prints_the_plain_table(cli):
    plain = cli("eval", "quickstart", "--max-examples", "20")
    once = cli("eval", "quickstart", "--max-examples", "20", "--attempts", "1")
    assert plain.code == once.code == 0 and once.out == plain.out
    assert plain.out.splitlines()[1].endswith("manifest  cell")  # no column of K attempts
    retried = cli("eval", "quickstart", "--max-examples", "20", "--attempts", "3")
    assert retried.out.splitlines()[1].split()[-2:] == ["exact@3", "manifest"]


def test_eval_with_k_attempts_reports_one_attempt_and_k_side_by_side(tiny, cli):
    plain = json.loads(cli("eval", tiny.run, "--json").out)
    result = cli("eval", tiny.run, "--json", "--attempts", "4")
    assert result.code == 0, result.err
    retried = json.loads(result.out)
    assert retried["exact_accuracy"] == plain["exact_accuracy"]  # the first attempt's
    assert retried["exact_accuracy@4"] >= plain["exact_accuracy"]
    text = cli("eval", tiny.run, "--attempts", "4").out
    assert f"{plain['exact_accuracy']:.2%} with 1 attempt" in text
    assert f"{retried['exact_accuracy@4']:.2%} with 4" in text
    assert "accuracy@" not in text  # the figure of K attempts is said once, in words


def test_evaluation_during_training_reports_both_and_the_summary_keeps_both(tiny, cli):
    (row,) = [r for r in metrics(tiny.run) if r.get("kind") == "eval"]
    assert {"exact_accuracy", "exact_accuracy@3"} <= set(row)
    summary = json.loads((tiny.run / "summary.json").read_text())
    assert summary["eval_attempts"] == 3
    assert summary["final_exact_accuracy@3"] == row["exact_accuracy@3"]
    assert summary["final_exact_accuracy"] == row["exact_accuracy"]
    result = cli("report", tiny.run, "--out", tiny.base / "report", "--json")
    assert result.code == 0, result.err
    (run,) = json.loads(result.out)["runs"]
    assert run["final_retried_exact_accuracy"] == row["exact_accuracy@3"]
    assert "final exact, K attempts" in (tiny.base / "report" / "index.html").read_text()


class _FailsAsGiven:
    """A stand-in network: a clashing answer to the puzzle as given, the true solution of any
    other puzzle (the puzzle moved by a symmetry)."""

    def __init__(self, network, given: np.ndarray) -> None:
        self.network, self.given = network, given.tolist()

    def __getattr__(self, name):
        return getattr(self.network, name)

    def initial_carry(self, batch):
        return self.network.initial_carry(batch)

    def __call__(self, carry, batch):
        carry, outputs = self.network(carry, batch)
        answers = []
        for row in batch["inputs"].cpu().numpy():
            solution = grid.encode(solve(grid.decode(row), limit=1).solution).astype(np.int64)
            if row.tolist() == self.given:
                solution[1] = solution[0]
            answers.append(solution)
        tokens = torch.as_tensor(np.stack(answers))
        logits = torch.nn.functional.one_hot(tokens, outputs["logits"].shape[-1]).float()
        return carry, {**outputs, "logits": logits}


def test_a_puzzle_failed_as_given_is_tried_again_and_the_accepted_answer_returned(tiny):
    model = trm.load(tiny.run)
    question = model.source.parse_puzzle(PUZZLE, 16).astype(np.int64)
    model.module = _FailsAsGiven(model.module, question)
    assert not model.solve(PUZZLE).valid
    solution = model.solve(PUZZLE, attempts=4)
    assert solution.valid and solution.attempt == 2 and solution.attempts == 4
    assert model.source.check_answer(question, solution.tokens)
    assert solution.document()["attempt"] == 2
    assert "attempts: the answer of attempt 2 of 4" in str(solution)


def test_bad_attempt_counts_are_one_line_errors(tiny, cli):
    for command in ("solve", "eval"):
        extra = [PUZZLE] if command == "solve" else []
        for count in ("0", "-2"):
            result = cli(command, tiny.run, *extra, "--attempts", count)
            assert_one_line_error(result, "--attempts must be at least 1", count)
    with pytest.raises(trm.TrmError, match=r"^attempts must be at least 1"):
        trm.load(tiny.run).solve(PUZZLE, attempts=0)
    result = cli("run", tiny.spec, "--out", tiny.base / "bad", "--set", "train.eval_attempts=0")
    assert_one_line_error(result, "train.eval_attempts")
    assert not (tiny.base / "bad").exists()
