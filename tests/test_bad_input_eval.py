"""Bad input to ``trm eval`` and ``trm solve``: one ``trm: error:`` line, exit 2, no traceback.

One tiny 4x4-Sudoku run is trained once for the module; each case gives it a bad option, a
file that is not a checkpoint, data of another shape or a malformed puzzle. An unsolvable
puzzle is not an error: ``trm solve`` shows the model's answer and says it cannot be valid.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import error_lines
from tests.tiny_run import build_tiny_data, write_spec
from trm.cli.main import main

GOOD_PUZZLE = "1... .... ..3. .4.."
# No repeated digit, yet row 1 cell 3 can hold neither 3 nor 4 (both are in its column).
UNSOLVABLE_PUZZLE = "12.. .... ..3. ..4."


def _save_variant(payload: dict, path: Path, change: Callable[[dict], None]) -> Path:
    variant = copy.deepcopy(payload)
    variant.pop("loaded_from", None)
    change(variant)
    torch.save(variant, path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A trained tiny run, a 6x6 dataset and a folder of files that are bad input."""
    base = tmp_path_factory.mktemp("bad_input_eval")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, max_steps=2)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    data6 = base / "data6"
    code = main(
        [
            "data", "build", "sudoku", "--size", "6", "--count", "16", "--test-count", "4",
            "--clues", "14", "--workers", "1", "--out", str(data6),
        ]
    )  # fmt: skip
    assert code == 0

    bad = base / "bad"
    bad.mkdir()
    (bad / "notes.txt").write_text("these are my notes\n")
    (bad / "random.bin").write_bytes(bytes(range(256)) * 16)
    (bad / "empty.pt").write_bytes(b"")
    with zipfile.ZipFile(bad / "archive.zip", "w") as archive:
        archive.writestr("readme.txt", "not a checkpoint")
    (bad / "config.json").write_text(json.dumps({"model": "trm", "spec": {}}))
    (bad / "garbage-after-pickle-header.pt").write_bytes(b"\x80\x02" + os.urandom(512))
    torch.save({"weights": torch.zeros(3)}, bad / "other-torch.pt")
    (bad / "empty-folder").mkdir()
    (bad / "puzzle-latin1.txt").write_bytes(b"1\xe9.. .... ..3. .4..\n")
    (bad / "puzzle-short.txt").write_text("1... ....\n")

    newest = sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1]
    payload = torch.load(newest, map_location="cpu", weights_only=True)
    first_key = sorted(payload["model"])[0]
    _save_variant(
        payload,
        bad / "damaged-weights.pt",
        lambda p: p["model"].__setitem__(first_key, torch.zeros(3)),
    )
    _save_variant(payload, bad / "unreadable-spec.pt", lambda p: p.__setitem__("spec", "x"))
    _save_variant(
        payload, bad / "data-moved.pt", lambda p: p.__setitem__("data_dir", str(base / "gone"))
    )
    _save_variant(
        payload,
        bad / "maze-source.pt",
        lambda p: p["spec"]["data"].__setitem__("source", "no-such-source"),
    )
    _save_variant(
        payload,
        bad / "trained-on-cuda.pt",
        lambda p: p["spec"]["runtime"].__setitem__("device", "cuda"),
    )
    corrupt_run = base / "corrupt-run"
    shutil.copytree(run_dir, corrupt_run)
    for path in (corrupt_run / "checkpoints").glob("step-*.pt"):
        path.write_bytes(path.read_bytes()[:100])
    return SimpleNamespace(
        base=base, data=data, data6=data6, run=run_dir, bad=bad, corrupt_run=corrupt_run
    )


# Each case: (id, the command line built from the fixture, words the error line must hold,
# words it must not hold).
CASES: list[tuple[str, Callable[[SimpleNamespace], list], list[str], list[str]]] = [
    ("eval-batch-size-zero", lambda t: ["eval", t.run, "--batch-size", "0"],
     ["--batch-size", "at least 1", "got 0"], []),
    ("eval-batch-size-negative", lambda t: ["eval", t.run, "--batch-size", "-1"],
     ["--batch-size", "at least 1", "got -1"], []),
    ("eval-batch-size-not-a-number", lambda t: ["eval", t.run, "--batch-size", "many"],
     ["--batch-size", "'many'"], []),
    ("eval-max-examples-negative", lambda t: ["eval", t.run, "--max-examples", "-5"],
     ["--max-examples", "-5"], []),
    ("eval-unknown-split", lambda t: ["eval", t.run, "--split", "nope"],
     ["nope", "test, train", "--split"], ["data directory", "does not exist"]),
    ("eval-data-missing", lambda t: ["eval", t.run, "--data", t.base / "nowhere"],
     ["--data", "nowhere", "does not exist"], []),
    ("eval-data-is-a-file", lambda t: ["eval", t.run, "--data", t.bad / "notes.txt"],
     ["--data", "notes.txt", "is a file"], []),
    ("eval-data-without-splits", lambda t: ["eval", t.run, "--data", t.bad / "empty-folder"],
     ["empty-folder", "no dataset splits"], []),
    ("eval-data-of-another-shape", lambda t: ["eval", t.run, "--data", t.data6],
     ["seq_len 16 in the checkpoint, 36 in the data", "vocab_size", "--data"], []),
    ("eval-trained-data-moved", lambda t: ["eval", t.bad / "data-moved.pt"],
     ["gone", "no longer there", "--data"], []),
    ("eval-checkpoint-missing", lambda t: ["eval", t.base / "none.pt"],
     ["none.pt", "does not exist"], []),
    ("eval-checkpoint-text-file", lambda t: ["eval", t.bad / "notes.txt"],
     ["notes.txt", "not a PyTorch checkpoint", "text file"], ["pickled"]),
    ("eval-checkpoint-random-bytes", lambda t: ["eval", t.bad / "random.bin"],
     ["random.bin", "not a PyTorch checkpoint"], ["pickled"]),
    ("eval-checkpoint-empty-file", lambda t: ["eval", t.bad / "empty.pt"],
     ["empty.pt", "is empty"], ["pickled"]),
    ("eval-checkpoint-zip-not-torch", lambda t: ["eval", t.bad / "archive.zip"],
     ["archive.zip", "zip archive but not a PyTorch checkpoint"], ["pickled", "enforce"]),
    ("eval-checkpoint-json-file", lambda t: ["eval", t.bad / "config.json"],
     ["config.json", "JSON"], ["pickled"]),
    ("eval-checkpoint-garbage-after-header",
     lambda t: ["eval", t.bad / "garbage-after-pickle-header.pt"],
     ["garbage-after-pickle-header.pt", "cannot be read"], ["pickled"]),
    ("eval-checkpoint-torch-file-not-trm", lambda t: ["eval", t.bad / "other-torch.pt"],
     ["other-torch.pt", "not a trm checkpoint"], []),
    ("eval-checkpoint-folder-without-checkpoints",
     lambda t: ["eval", t.bad / "empty-folder"],
     ["empty-folder", "no checkpoint"], []),
    ("eval-run-with-only-corrupt-checkpoints", lambda t: ["eval", t.corrupt_run],
     ["no valid checkpoint", "corrupt-run"], []),
    ("eval-checkpoint-damaged-weights", lambda t: ["eval", t.bad / "damaged-weights.pt"],
     ["damaged-weights.pt", "shape [3] in the checkpoint"], []),
    ("eval-checkpoint-unreadable-spec", lambda t: ["eval", t.bad / "unreadable-spec.pt"],
     ["unreadable-spec.pt", "spec"], []),
    ("solve-checkpoint-text-file", lambda t: ["solve", t.bad / "notes.txt", GOOD_PUZZLE],
     ["notes.txt", "not a PyTorch checkpoint"], ["pickled"]),
    ("solve-checkpoint-folder-without-checkpoints",
     lambda t: ["solve", t.bad / "empty-folder", GOOD_PUZZLE],
     ["empty-folder", "no checkpoint"], []),
    ("solve-unknown-data-source", lambda t: ["solve", t.bad / "maze-source.pt", GOOD_PUZZLE],
     ["no-such-source", "--plugins"], []),
    ("solve-puzzle-file-not-utf8", lambda t: ["solve", t.run, t.bad / "puzzle-latin1.txt"],
     ["puzzle-latin1.txt", "not UTF-8", "0xe9"], []),
    ("solve-puzzle-file-wrong-length", lambda t: ["solve", t.run, t.bad / "puzzle-short.txt"],
     ["8 cells", "expected 16", "puzzle-short.txt"], []),
    ("solve-puzzle-is-a-folder", lambda t: ["solve", t.run, t.bad / "empty-folder"],
     ["empty-folder", "is a folder"], []),
    ("solve-puzzle-too-short", lambda t: ["solve", t.run, "1... ...."],
     ["8 cells", "expected 16"], []),
    ("solve-puzzle-empty", lambda t: ["solve", t.run, ""],
     ["0 cells", "expected 16"], []),
    ("solve-puzzle-bad-character", lambda t: ["solve", t.run, "1x.. .... ..3. .4.."],
     ["'x'", "cell 2"], []),
    ("solve-puzzle-digit-too-large", lambda t: ["solve", t.run, "5... .... ..3. .4.."],
     ["digit 5", "4x4"], []),
    ("solve-puzzle-repeated-digit", lambda t: ["solve", t.run, "11.. .... ..3. .4.."],
     ["twice"], []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "expected", "forbidden"),
    [pytest.param(build, exp, forb, id=case_id) for case_id, build, exp, forb in CASES],
)
def test_bad_input_is_one_line_and_exit_2(tiny, cli, build, expected, forbidden):
    result = cli(*build(tiny))
    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    lines = error_lines(result.err)
    assert len(lines) == 1, result.err
    (line,) = lines
    for word in expected:
        assert word in line, f"{word!r} not in {line!r}"
    for word in forbidden:
        assert word not in line, f"{word!r} in {line!r}"


def test_every_case_has_its_own_id():
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids)) >= 15


def test_eval_json_on_the_good_path(tiny, cli):
    result = cli("eval", tiny.run, "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["examples"] == 16
    assert report["split"] == str(tiny.data / "test")
    assert report["step"] == 2
    assert 0.0 <= report["exact_accuracy"] <= report["cell_accuracy"] <= 1.0


def test_eval_max_examples_zero_scores_all_and_n_scores_n(tiny, cli):
    every = cli("eval", tiny.run, "--json", "--max-examples", "0")
    assert every.code == 0, every.err
    assert json.loads(every.out)["examples"] == 16
    some = cli("eval", tiny.run, "--json", "--max-examples", "3", "--split", "train")
    assert some.code == 0, some.err
    assert json.loads(some.out)["examples"] == 3


def test_a_checkpoint_trained_on_a_gpu_is_scored_here(tiny, cli):
    result = cli("eval", tiny.bad / "trained-on-cuda.pt", "--json", "--max-examples", "2")
    assert result.code == 0, result.err
    assert json.loads(result.out)["examples"] == 2


def test_solve_on_the_good_path(tiny, cli):
    result = cli("solve", tiny.run, GOOD_PUZZLE)
    assert result.code == 0, result.err
    assert "puzzle:" in result.out and "model's answer:" in result.out
    assert "valid solution: " in result.out
    assert "has no solution" not in result.out

    result = cli("solve", tiny.run, GOOD_PUZZLE, "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert len(report["question"]) == len(report["answer"]) == 16
    assert report["solvable"] in (True, None)
    assert isinstance(report["valid"], bool)


def test_solve_reads_a_puzzle_file(tiny, cli, tmp_path):
    puzzle = tmp_path / "puzzle.txt"
    puzzle.write_text("1 . | . .\n. . | . .\n----+----\n. . | 3 .\n. 4 | . .\n")
    result = cli("solve", tiny.run, puzzle, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["question_text"].startswith("1 . | . .")


def _assert_unsolvable_report(tiny, cli, solver_name: str) -> None:
    text = cli("solve", tiny.run, UNSOLVABLE_PUZZLE)
    assert text.code == 0, text.err
    assert not error_lines(text.err)
    assert "valid solution: no" in text.out
    assert (
        f"the puzzle has no solution (checked by the {solver_name} solver); "
        "the model's answer cannot be valid"
    ) in text.out
    answer_at = text.out.index("model's answer:")
    assert text.out.index("the puzzle has no solution") > answer_at

    as_json = cli("solve", tiny.run, UNSOLVABLE_PUZZLE, "--json")
    assert as_json.code == 0, as_json.err
    report = json.loads(as_json.out)
    assert report["solvable"] is False
    assert report["valid"] is False


def test_unsolvable_puzzle_is_reported_not_an_error(tiny, cli):
    from trm.plugins.tasks.sudoku.source import SudokuSource

    if not hasattr(SudokuSource, "is_solvable"):
        pytest.skip("SudokuSource has no is_solvable yet")
    _assert_unsolvable_report(tiny, cli, "sudoku")
    result = cli("solve", tiny.run, GOOD_PUZZLE, "--json")
    assert json.loads(result.out)["solvable"] is True


def test_unsolvable_verdict_of_any_source_is_shown(tiny, cli, monkeypatch):
    """The CLI reports whatever the source's optional is_solvable says (a stand-in here)."""
    from trm.plugins.tasks.sudoku.source import SudokuSource

    monkeypatch.setattr(SudokuSource, "is_solvable", lambda self, q: False, raising=False)
    _assert_unsolvable_report(tiny, cli, "sudoku")


def test_solvable_is_null_when_the_source_cannot_say(tiny, cli, monkeypatch):
    from trm.plugins.tasks.sudoku.source import SudokuSource

    if hasattr(SudokuSource, "is_solvable"):
        monkeypatch.delattr(SudokuSource, "is_solvable")
    result = cli("solve", tiny.run, UNSOLVABLE_PUZZLE, "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["solvable"] is None
    text = cli("solve", tiny.run, UNSOLVABLE_PUZZLE)
    assert "has no solution" not in text.out
