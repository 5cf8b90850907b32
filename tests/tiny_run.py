"""A tiny real run for resilience tests: 4x4 Sudoku, hidden 16, one thread, a dozen steps.

``build_tiny_data`` builds the dataset once through ``trm data build``; ``write_spec`` writes
a run spec for it (overrides as ``section.key=value`` pairs); ``run_here`` runs ``trm run``
in the test's process; the readers return a run's metrics rows, summary and checkpoint files.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from trm.cli.main import main

TOTAL_STEPS = 12
EVAL_INTERVAL = 5
GLOBAL_BATCH = 8

SPEC = """\
name = "tiny"

[arch]
hidden_size = 16
expansion = 2.0
num_heads = 2
L_layers = 1
H_cycles = 2
L_cycles = 2
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 16
puzzle_emb_len = 1
halt_max_steps = 3
halt_exploration_prob = 0.5

[train]
global_batch_size = {global_batch}
max_steps = {steps}
lr = 1e-3
lr_warmup_steps = 2
ema = true
ema_rate = 0.9
eval_interval = {eval_interval}
eval_max_examples = 8
checkpoint_interval_steps = 1
checkpoint_keep = 3
seed = 3

[data]
source = "sudoku"
dir = "{data_dir}"

[runtime]
device = "cpu"
# fp32: the OOM test compares runs whose micro-batches differ; bf16 rounding would swamp it
precision = "fp32"
threads = 1
micro_batch_size = {micro}
"""


def build_tiny_data(out: Path) -> Path:
    """A 4x4 Sudoku dataset (64 train, 16 test puzzles) at ``out``."""
    code = main(
        [
            "data",
            "build",
            "sudoku",
            "--size",
            "4",
            "--count",
            "64",
            "--test-count",
            "16",
            "--clues",
            "8",
            "--workers",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return out


def write_spec(folder: Path, data_dir: Path, micro: int = 4, **train: Any) -> Path:
    """The tiny spec in ``folder/tiny.toml``; ``train`` overrides ``[train]`` keys."""
    text = SPEC.format(
        global_batch=GLOBAL_BATCH,
        steps=TOTAL_STEPS,
        eval_interval=EVAL_INTERVAL,
        data_dir=data_dir,
        micro=micro,
    )
    for key, value in train.items():
        lines = [ln for ln in text.splitlines() if not ln.startswith(f"{key} =")]
        index = lines.index("[train]") + 1
        lines.insert(index, f"{key} = {json.dumps(value)}")
        text = "\n".join(lines) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.toml"
    path.write_text(text)
    return path


def run_here(spec: Path, run_dir: Path, log: Path) -> tuple[int, str]:
    """``trm run SPEC --out RUN_DIR`` in this process, as in a subprocess whose environment
    has no ``TRM_`` variable, but for ``TRM_COMPILE_LEDGER`` (tests/conftest.py); returns the
    exit code and what the run printed on stderr, which is also written to ``log``.

    For a run that ends by itself, where the test is not about the process: it saves a Python
    and torch start-up (seconds). A run sets torch's global seed and thread count, so call it
    from one thread at a time (the main thread, whose signal handlers a run may set)."""
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("TRM_")]:
            if key != "TRM_COMPILE_LEDGER":
                patch.delenv(key)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["run", str(spec), "--out", str(run_dir)])
    log.write_text(err.getvalue())
    return code, err.getvalue()


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def train_steps(run_dir: Path) -> list[int]:
    return [row["step"] for row in metrics(run_dir) if "kind" not in row]


def eval_steps(run_dir: Path) -> list[int]:
    return [row["step"] for row in metrics(run_dir) if row.get("kind") == "eval"]


def events(run_dir: Path, name: str | None = None) -> list[dict[str, Any]]:
    return [
        row
        for row in metrics(run_dir)
        if row.get("kind") == "event" and (name is None or row["event"] == name)
    ]


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def checkpoint_steps(run_dir: Path) -> list[int]:
    folder = run_dir / "checkpoints"
    return sorted(int(p.name[5:13]) for p in folder.glob("step-*.pt"))


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]
