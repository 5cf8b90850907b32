"""benchmarks/explore.py on the tasks beyond Sudoku: a maze run's document keeps, per noise
scale, the plain trajectory's Q-head figures and the maze's valid and optimal paths of the
chosen answers; an ARC run's is scored by whole tasks too (pass@K from the vote over each test
input's versions, for every N and rule), printed by ``--table tasks`` and drawn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trm.cli.main import main
from trm.data.selection import find_selection_rule
from trm.plan.dataset import data_sources
from trm.plugin_manager import load_plugins

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "explore.py"

TINY_ARCH = """
[arch]
hidden_size = 16
expansion = 2.0
num_heads = 2
L_layers = 1
H_cycles = 1
L_cycles = 1
halt_max_steps = 2
"""

MAZE_SPEC = (
    'name = "maze-tiny"\n'
    + TINY_ARCH
    + """pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 0

[train]
global_batch_size = 16
max_steps = 2
lr_warmup_steps = 1
eval_interval = 2

[data]
source = "maze"

[data.generate]
preset = ""
size = 4
min_walls = 1
max_walls = 3
min_path = 2
count = 32
test_count = 16

[runtime]
device = "cpu"
precision = "fp32"
threads = 1
"""
)

ARC_SPEC = (
    'name = "arc-tiny"\n'
    + TINY_ARCH
    + """pos_encodings = "rope"
mlp_t = false
puzzle_emb_ndim = 16
puzzle_emb_len = 1

[train]
global_batch_size = 16
max_steps = 2
lr_warmup_steps = 1
eval_interval = 2

[data]
source = "arc"

[data.generate]
version = 1
augment = 2
side = 6
max_tasks = 2

[runtime]
device = "cpu"
precision = "fp32"
threads = 1
"""
)


def _run(folder: Path, spec_text: str) -> Path:
    spec = folder / "spec.toml"
    spec.write_text(spec_text)
    assert main(["run", str(spec), "--out", str(folder / "run")]) == 0
    return folder / "run"


def _explore(*args: object) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=SCRIPT.parent,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.slow
def test_a_maze_document_keeps_the_q_head_and_the_paths_of_each_scale(tmp_path):
    run = _run(tmp_path, MAZE_SPEC)
    out = tmp_path / "maze.json"
    _explore(run, "--puzzles", 8, "--seed", 5, "--max-explore", 2, "--noise", "0.3,1.0",
             "--each-rule", "--timing-puzzles", 2, "--out", out)  # fmt: skip
    document = json.loads(out.read_text())
    default = find_selection_rule(
        load_plugins(()), None, data_sources(load_plugins(()))["maze"], ""
    )
    others = sorted({"q", "halt-first", "rules", "vote"} - {default.name})
    rules = [default.name, *others]  # the maze's default first, then every other
    assert [(s["noise"], s["rule"]) for s in document["summaries"]] == [
        (noise, rule) for noise in (0.3, 1.0) for rule in rules
    ]
    for summary in document["summaries"]:
        assert summary["trajectories"] == 2
        for key in ("q_halt_accuracy", "valid_path_rate", "optimal_path_rate"):
            assert 0.0 <= summary[key] <= 1.0
        assert summary["oracle_exact_accuracy"] >= summary["exact_accuracy"]
    assert "task_rows" not in document  # mazes are scored maze by maze
    table = _explore("--from", out, "--table", "summary", "--markdown").stdout.splitlines()
    assert table[0].startswith("| noise | N | rule | exact_accuracy | oracle_exact_accuracy |")
    assert "optimal_path_rate" in table[0] and len(table) == 2 + 8


@pytest.mark.slow
def test_an_arc_document_scores_whole_tasks_at_every_n_and_rule(tmp_path):
    run = _run(tmp_path, ARC_SPEC)
    out, png = tmp_path / "arc.json", tmp_path / "arc.png"
    _explore(run, "--seed", 5, "--max-explore", 2, "--noise", "0.3", "--timing-puzzles", 2,
             "--out", out, "--png", png)  # fmt: skip
    document = json.loads(out.read_text())
    assert document["task_metric"] == "pass@2"
    rows = {(r["trajectories"], r["rule"]): r for r in document["task_rows"]}
    assert set(rows) == {(n, rule) for n in (1, 2) for rule in ("halt-first", "q", "vote")}
    for row in rows.values():
        assert 0.0 <= row["pass@1"] <= row["pass@2"] <= 1.0
    # N = 1 is the plain run, whichever rule would choose
    assert len({rows[(1, rule)]["pass@2"] for rule in ("halt-first", "q", "vote")}) == 1
    assert png.stat().st_size > 0
    table = _explore("--from", out, "--table", "tasks", "--markdown").stdout
    assert table.splitlines()[0] == "| noise | rule | metric | N=1 | N=2 |"
    assert "| 0.3 | q | pass@2 |" in table
