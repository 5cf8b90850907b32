"""Every document in benchmarks/results/ says how it was made — the command, the trm commit,
the machine, the date and the load — under ``"provenance"`` (benchmarks/provenance.py), and
the benchmarks that print a document write that block themselves."""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
COMMIT = re.compile(r"[0-9a-f]{40}(-dirty)?")


def _provenance_module():
    spec = importlib.util.spec_from_file_location(
        "provenance_benchmark", REPO / "benchmarks" / "provenance.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def problems_of_block(block: object) -> list[str]:
    """What a provenance block lacks; empty when it names everything."""
    if not isinstance(block, dict):
        return ["no provenance block"]
    problems = [f"no {key}" for key in _provenance_module().KEYS if key not in block]
    if not str(block.get("command", "")).startswith(("python benchmarks/", "trm ")):
        problems.append(f"command {block.get('command')!r} is not a benchmarks/ or trm command")
    if not COMMIT.fullmatch(str(block.get("commit", ""))):
        problems.append(f"commit {block.get('commit')!r} is not a full commit hash")
    machine = block.get("machine")
    if not isinstance(machine, dict) or not machine.get("cpu_model"):
        problems.append("machine names no cpu_model")
    try:
        datetime.date.fromisoformat(str(block.get("date", ""))[:10])
    except ValueError:
        problems.append(f"date {block.get('date')!r} is not an ISO date")
    return problems


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_each_results_document_names_its_command_commit_machine_and_date(path):
    document = json.loads(path.read_text(encoding="utf-8"))
    assert problems_of_block(document.get("provenance")) == []


def test_a_document_without_its_commit_is_caught():
    block = json.loads((RESULTS / "bench-xeon-amx.json").read_text())["provenance"]
    assert problems_of_block(block) == []
    del block["commit"]
    assert "no commit" in problems_of_block(block)
    assert problems_of_block(None) == ["no provenance block"]


def test_a_fresh_block_names_the_command_as_typed_and_this_commit(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    block = _provenance_module().provenance(
        [str(REPO / "benchmarks" / "bench.py"), "--specs", "a b", "--json"]
    )
    assert problems_of_block(block) == []
    assert block["command"] == "python benchmarks/bench.py --specs 'a b' --json"
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert block["commit"].removesuffix("-dirty") == head
    assert block["machine"]["logical_cores"] >= 1


@pytest.mark.parametrize(
    "name",
    [
        "activation_checkpointing",
        "bench",
        "data_pipeline",
        "distributed",
        "interop_eval",
        "learning",
        "loss_curves",
        "memory_accuracy",
        "step_profile",
        "tier_fit",
    ],
)
def test_each_benchmark_that_prints_a_document_adds_its_provenance(name):
    source = (REPO / "benchmarks" / f"{name}.py").read_text(encoding="utf-8")
    assert "from provenance import provenance" in source
    assert '"provenance"' in source and "provenance()" in source


def test_a_benchmark_document_carries_a_complete_provenance_block(tmp_path):
    for name, loss in (("a", 1.0), ("b", 1.5)):
        run = tmp_path / name
        run.mkdir()
        rows = [{"step": step, "loss": loss / step} for step in range(1, 5)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = REPO / "benchmarks" / "loss_curves.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "a"), str(tmp_path / "b"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    block = json.loads(done.stdout)["provenance"]
    assert problems_of_block(block) == []
    assert block["command"].startswith("python benchmarks/loss_curves.py ")


def test_the_provenance_helper_imports_as_the_scripts_import_it():
    done = subprocess.run(
        [sys.executable, "-c", "from provenance import KEYS; print(len(KEYS))"],
        cwd=REPO / "benchmarks",
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "5"
