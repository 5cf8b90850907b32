"""End to end through `trm`: a tiny TRM learns 4x4 Sudoku, and eval / solve read its run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.data.shape import read_shape
from trm.device.contract import host_placement
from trm.evaluation.evaluate import evaluate
from trm.model import build_model
from trm.spec import load_spec

SPEC = """
name = "learn-test"
[arch]
hidden_size = 32
num_heads = 2
L_layers = 2
H_cycles = 2
L_cycles = 2
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 0
puzzle_emb_len = 1
halt_max_steps = 3
[train]
global_batch_size = 64
max_steps = 150
lr = 2e-3
lr_warmup_steps = 20
lr_min_ratio = 0.1
eval_interval = 75
[data]
source = "sudoku"
[data.generate]
size = 4
count = 1500
test_count = 200
clues = 9
[runtime]
threads = 1
"""


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    from trm.cli.main import main

    root = tmp_path_factory.mktemp("learn")
    spec_path = root / "spec.toml"
    spec_path.write_text(SPEC)
    assert main(["run", str(spec_path), "--out", str(root / "run")]) == 0
    return root / "run"


def untrained_exact_accuracy(run_dir: Path) -> float:
    spec = load_spec(run_dir / "spec.toml")
    torch.manual_seed(spec.train.seed)
    split = open_split(run_dir / "data" / "test")
    model = build_model(spec.arch, read_shape(run_dir / "data", "test"))
    result = evaluate(model, SplitIndex(split), spec.arch.halt_max_steps, 256, host_placement())
    return result["exact_accuracy"]


@pytest.mark.slow
def test_trained_tiny_trm_is_far_above_untrained_on_held_out_puzzles(trained_run):
    summary = json.loads((trained_run / "summary.json").read_text())
    untrained = untrained_exact_accuracy(trained_run)
    assert summary["steps"] == 150 and summary["stopped"] == "finished"
    assert summary["final_exact_accuracy"] >= 0.5
    assert summary["final_exact_accuracy"] >= untrained + 0.4


def test_run_directory_holds_the_documented_files(trained_run):
    for name in ("spec.toml", "hardware.json", "adaptations.json", "metrics.jsonl", "summary.json"):
        assert (trained_run / name).is_file(), name
    assert list((trained_run / "checkpoints").glob("step-*.pt"))
    rows = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "kind" not in r]  # eval rows and events have a kind
    assert [r["step"] for r in train_rows] == list(range(1, 151))
    for key in ("samples", "samples_per_s", "loss", "lr", "mem_host_mb", "mem_device_mb"):
        assert key in train_rows[0]
    evals = [r for r in rows if r.get("kind") == "eval"]
    assert [r["step"] for r in evals] == [75, 150]
    summary = json.loads((trained_run / "summary.json").read_text())
    assert len(summary["final_weights_sha256"]) == 64


def test_eval_command_scores_the_checkpoint_like_the_run_did(cli, trained_run):
    result = cli("eval", trained_run, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    summary = json.loads((trained_run / "summary.json").read_text())
    assert doc["examples"] == 200
    assert doc["exact_accuracy"] == pytest.approx(summary["final_exact_accuracy"])


def test_solve_prints_both_grids_and_checks_validity(cli, trained_run):
    split = open_split(trained_run / "data" / "test")
    question = split.sets["all"].inputs[0]
    text = "".join("." if t == 1 else str(int(t) - 1) for t in question)
    result = cli("solve", trained_run, text)
    assert result.code == 0, result.err
    assert "model's answer:" in result.out
    assert "valid solution: yes" in result.out or "valid solution: no" in result.out
    doc = json.loads(cli("solve", trained_run, text, "--json").out)
    assert len(doc["answer"]) == 16


def test_solve_rejects_a_malformed_puzzle_with_one_line(cli, trained_run):
    result = cli("solve", trained_run, "12x")
    assert result.code == 2
    assert result.err.count("trm: error:") == 1
