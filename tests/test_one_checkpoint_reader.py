"""Checkpoint files are hashed and loaded in one place: core, plugins and contrib define
``file_sha256`` once and call ``torch.load`` once (in :mod:`trm.checkpoint_file`), so a
refusal reads the same whichever command met the file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from trm.checkpoint_file import load_weights_only
from trm.errors import TrmError
from trm.plugins.formats.reference_weights import load_torch_file
from trm.plugins.operations.checkpoint import read_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("core", "plugins", "contrib")


def _trees() -> list[tuple[Path, ast.AST]]:
    return [
        (path, ast.parse(path.read_text(encoding="utf-8")))
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


def _is_torch_load(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "load"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
    )


def test_file_sha256_is_defined_once_in_core_plugins_and_contrib():
    found = [
        str(path.relative_to(ROOT))
        for path, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "file_sha256"
    ]
    assert found == ["core/checkpoint_file.py"]


def test_torch_load_is_called_only_by_the_safe_loader():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path, tree in _trees()
        for node in ast.walk(tree)
        if _is_torch_load(node)
    ]
    assert len(found) == 1 and found[0].startswith("core/checkpoint_file.py:"), found


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"", ["is empty (0 bytes)"]),
        (b"these are my notes\n", ["not a PyTorch checkpoint", "text file", "not a PyTorch file"]),
        (b'{"step": 3}', ["JSON"]),
    ],
)
def test_trm_and_reference_readers_refuse_a_file_in_the_same_words(tmp_path, content, fragments):
    path = tmp_path / "step_1"
    path.write_bytes(content)
    messages = []
    for read in (read_checkpoint, lambda p: load_torch_file(p, "checkpoint")):
        with pytest.raises(TrmError) as caught:
            read(path)
        messages.append(str(caught.value).split("; give")[0])
    assert messages[0] == messages[1]
    assert all(fragment in messages[0] for fragment in fragments)


def test_pickled_code_is_refused_not_run(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "spec": {}, "hook": print}, path)
    with pytest.raises(TrmError, match="was refused: it carries pickled code"):
        load_weights_only(path, "checkpoint", "give another")
