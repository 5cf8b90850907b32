"""The shipped ``sudoku9-laptop`` scored with 8 attempts: ``trm eval sudoku9-laptop --attempts
8`` reproduces its manifest's plain and 8-attempt figures, and shows them beside its own.

Scoring its 1,500 puzzles 8 times takes minutes on 2 cores: these tests are apart from
tests/test_shipped_weights.py (whose ``trm eval`` of the other shipped models is its own long
part) so that under ``pytest -n`` (``--dist loadfile``) two workers share the two.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tests.test_shipped_weights import AT_8, assert_eval_reproduces_the_manifest
from trm.cli.main import main
from trm.shipped import shipped_manifest


@pytest.fixture(scope="module")
def at_8_document(tmp_path_factory) -> dict:
    """``trm eval sudoku9-laptop --attempts 8 --json``, run once for the module: read by the
    test of its 8-attempt figures and, for its plain figures, by the test that it reproduces
    the manifest (attempt 1 is the puzzle as given, so the plain answer
    (trm.evaluation.attempts): the document's exact_accuracy is plain ``trm eval``'s, which
    would score attempt 1 of the same 1,500 puzzles again)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("eval-at-8"))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["eval", AT_8, "--attempts", "8", "--json"])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


@pytest.mark.slow
def test_eval_of_the_8_attempt_model_reproduces_the_manifest_within_2_points(at_8_document):
    assert_eval_reproduces_the_manifest(AT_8, at_8_document)


@pytest.mark.slow
def test_eval_name_with_8_attempts_reproduces_and_shows_the_manifests_figures(
    at_8_document, cli, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    manifest = shipped_manifest(AT_8)
    assert at_8_document["model"] == AT_8
    for row, kind in zip(at_8_document["kinds"], manifest.kinds, strict=True):
        (retried,) = [r for r in kind.retried if r.attempts == 8]
        assert row["manifest_exact_accuracy@8"] == retried.exact_accuracy
        assert abs(row["exact_accuracy@8"] - retried.exact_accuracy) <= 0.02
        assert abs(row["exact_accuracy"] - kind.exact_accuracy) <= 0.02
    text = cli("eval", "sudoku9-laptop", "--attempts", "8", "--max-examples", "20").out
    assert "exact@8" in text
    for kind in manifest.kinds:
        assert f"{kind.retried[0].exact_accuracy:.2%}" in text
