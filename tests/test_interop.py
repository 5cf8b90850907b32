"""Reference checkpoints in and out: ``trm import``, ``trm export --format reference`` and
``trm run --init-from``, against an independent implementation of the reference's TRM
(tests/reference_trm.py) whose ``state_dict()`` is a reference checkpoint.

The imported run evaluates like the reference model (same logits to rounding, same accuracy),
export then re-import is bit-identical, an imported run trains on with fresh optimizers, and
``--init-from`` a puzzle table of another size starts every row from its mean row.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from tests.reference_trm import ARCH_NAME, ReferenceLossHead, randomise
from tests.tiny_run import build_tiny_data, checkpoint_steps, train_steps, write_spec
from trm.cli.main import main
from trm.model import build_model
from trm.plugins.operations.checkpoint import read_checkpoint
from trm.restore import checkpoint_shape, restore_model

STEP = 10
SEQ_LEN, VOCAB = 16, 6  # the tiny 4x4 Sudoku dataset


def reference_arch(**changes) -> dict:
    arch = {
        "name": ARCH_NAME,
        "loss": {"name": "losses@ACTLossHead", "loss_type": "stablemax_cross_entropy"},
        "H_cycles": 2,
        "L_cycles": 2,
        "H_layers": 0,
        "L_layers": 1,
        "hidden_size": 16,
        "expansion": 2,
        "num_heads": 2,
        "pos_encodings": "rope",
        "mlp_t": False,
        "puzzle_emb_ndim": 16,
        "puzzle_emb_len": 1,
        "halt_max_steps": 3,
        "halt_exploration_prob": 0.5,
        "forward_dtype": "float32",
        "no_ACT_continue": True,
    }
    arch.update(changes)
    return arch


def reference_config(data: Path, arch: dict) -> dict:
    """An all_config.yaml as the reference's pretrain.py dumps it."""
    return {
        "arch": arch,
        "beta1": 0.9,
        "beta2": 0.95,
        "checkpoint_every_eval": False,
        "checkpoint_path": "checkpoints/Sudoku-ACT-torch/trm tiny",
        "data_paths": [str(data)],
        "data_paths_test": [],
        "ema": True,
        "ema_rate": 0.999,
        "epochs": 2,
        "eval_interval": 1,
        "eval_save_outputs": [],
        "evaluators": [],
        "freeze_weights": False,
        "global_batch_size": 8,
        "load_checkpoint": None,
        "lr": 0.001,
        "lr_min_ratio": 1.0,
        "lr_warmup_steps": 2,
        "min_eval_interval": 0,
        "project_name": "Sudoku-ACT-torch",
        "puzzle_emb_lr": 0.01,
        "puzzle_emb_weight_decay": 0.1,
        "run_name": "trm tiny",
        "seed": 3,
        "weight_decay": 0.1,
    }


def write_reference_run(
    folder: Path, data: Path, arch: dict, compiled: bool, identifiers: int = 1, seed: int = 7
) -> tuple[Path, ReferenceLossHead]:
    """A reference run's folder: ``step_10`` (random weights) and ``all_config.yaml``."""
    folder.mkdir(parents=True, exist_ok=True)
    head = ReferenceLossHead(arch, SEQ_LEN, VOCAB, identifiers)
    randomise(head, seed)
    prefix = "_orig_mod." if compiled else ""
    torch.save({prefix + k: v for k, v in head.state_dict().items()}, folder / f"step_{STEP}")
    config = reference_config(data, arch)
    (folder / "all_config.yaml").write_text(yaml.safe_dump(config))
    return folder / f"step_{STEP}", head


def held_out(data: Path) -> dict[str, np.ndarray]:
    return {k: np.load(data / "test" / f"all__{k}.npy") for k in ("inputs", "labels")}


def reference_scores(head: ReferenceLossHead, data: Path) -> tuple[float, float]:
    """Exact and cell accuracy of the reference model on the test split (labels equal to
    dataset.json's ignore_label_id are not scored)."""
    split = held_out(data)
    ignore = json.loads((data / "test" / "dataset.json").read_text())["ignore_label_id"]
    inputs = torch.from_numpy(split["inputs"]).long()
    labels = torch.from_numpy(split["labels"]).long()
    logits, _ = head.evaluate(inputs, torch.zeros(len(inputs), dtype=torch.long))
    mask = labels != ignore
    right = ((logits.argmax(-1) == labels) & mask).sum(-1)
    counts = mask.sum(-1)
    exact = float((right == counts).float().mean())
    cells = float((right.float() / counts.float()).mean())
    return exact, cells


def trm_logits(run_dir: Path, inputs: torch.Tensor) -> torch.Tensor:
    """The logits of the model ``trm eval`` restores from ``run_dir``, after all steps."""
    payload = read_checkpoint(sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1])
    spec, model = restore_model(payload, torch.device("cpu"))
    batch = {
        "inputs": inputs,
        "labels": inputs,
        "puzzle_identifiers": torch.zeros(len(inputs), dtype=torch.long),
    }
    carry = model.initial_carry(batch)
    with torch.no_grad():
        for _ in range(spec.arch.halt_max_steps):
            carry, outputs = model(carry, batch)
    return outputs["logits"].float()


def eval_json(run_dir: Path, capsys) -> dict:
    assert main(["eval", str(run_dir), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("interop")
    data = build_tiny_data(base / "data")
    return SimpleNamespace(base=base, data=data)


@pytest.mark.parametrize(
    ("compiled", "arch_changes"),
    [
        (True, {}),  # attention with RoPE, keys with _orig_mod.
        (False, {"mlp_t": True, "pos_encodings": "none"}),  # the MLP variant, plain keys
        (True, {"pos_encodings": "learned", "puzzle_emb_len": 2}),  # learned positions
    ],
)
def test_imported_weights_evaluate_like_the_reference_model(
    tiny, tmp_path, capsys, compiled, arch_changes
):
    arch = reference_arch(**arch_changes)
    step_file, head = write_reference_run(tmp_path / "ref", tiny.data, arch, compiled)
    run_dir = tmp_path / "imported"
    assert main(["import", str(step_file), "--out", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert ("_orig_mod." in err) == compiled
    inputs = torch.from_numpy(held_out(tiny.data)["inputs"]).long()
    expected, _ = head.evaluate(inputs, torch.zeros(len(inputs), dtype=torch.long))
    torch.testing.assert_close(trm_logits(run_dir, inputs), expected, atol=1e-4, rtol=1e-4)
    result = eval_json(run_dir, capsys)
    exact, cells = reference_scores(head, tiny.data)
    assert result["step"] == STEP
    assert result["exact_accuracy"] == pytest.approx(exact)
    assert result["cell_accuracy"] == pytest.approx(cells)
    assert 0 < cells < 1  # random weights: some cells right, not all (the check can fail)


def test_export_then_reimport_is_bit_identical(tiny, tmp_path, capsys):
    step_file, _ = write_reference_run(tmp_path / "ref", tiny.data, reference_arch(), True)
    first = tmp_path / "first"
    assert main(["import", str(step_file), "--out", str(first)]) == 0
    exported = tmp_path / "exported"
    assert main(["export", str(first), "--format", "reference", "--out", str(exported)]) == 0
    original = torch.load(step_file, weights_only=True)
    written = torch.load(exported / f"step_{STEP}", weights_only=True)
    assert sorted(written) == sorted(original)
    for key, tensor in original.items():
        assert written[key].dtype == tensor.dtype, key
        assert torch.equal(written[key], tensor), key
    config = yaml.safe_load((exported / "all_config.yaml").read_text())
    assert config["arch"]["name"] == ARCH_NAME
    assert config["load_checkpoint"] == str((exported / f"step_{STEP}").resolve())
    second = tmp_path / "second"
    assert main(["import", str(exported / f"step_{STEP}"), "--out", str(second)]) == 0
    a = read_checkpoint(first / "checkpoints" / f"step-{STEP:08d}.pt")
    b = read_checkpoint(second / "checkpoints" / f"step-{STEP:08d}.pt")
    assert sorted(a["model"]) == sorted(b["model"])
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    capsys.readouterr()


def test_import_records_the_mapping_and_reports(tiny, tmp_path, capsys):
    write_reference_run(tmp_path / "ref", tiny.data, reference_arch(), False)
    run_dir = tmp_path / "imported"
    assert main(["import", str(tmp_path / "ref"), "--out", str(run_dir)]) == 0  # the folder
    spec = (run_dir / "spec.toml").read_text()
    assert 'source = "sudoku"' in spec and "ema = true" in spec
    record = json.loads((run_dir / "import.json").read_text())
    assert record["step"] == STEP and "run_name" in record["left_out"]
    # eval_interval = 1 epoch of 64 puzzles at 8 a step = 8 steps
    assert "eval_interval = 8" in spec
    assert main(["report", str(run_dir)]) == 0
    assert main(["solve", str(run_dir), "1... .... ..3. .4.."]) == 0
    capsys.readouterr()


def test_import_then_resume_trains_on_with_fresh_optimizers(tiny, tmp_path, capsys):
    step_file, _ = write_reference_run(tmp_path / "ref", tiny.data, reference_arch(), True)
    run_dir = tmp_path / "imported"
    assert main(["import", str(step_file), "--out", str(run_dir)]) == 0
    code = main(
        [
            "run", str(run_dir / "spec.toml"), "--out", str(run_dir), "--max-steps", str(STEP + 2),
            "--set", "runtime.device=cpu", "--set", "runtime.threads=1",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    fresh = [line for line in err.splitlines() if "optimizers start fresh" in line]
    assert len(fresh) == 1, err
    assert f"resumed from step {STEP}" in err
    assert train_steps(run_dir) == [STEP + 1, STEP + 2]
    assert checkpoint_steps(run_dir)[-1] == STEP + 2


def test_init_from_a_table_of_another_size_starts_every_row_from_its_mean(tiny, tmp_path, capsys):
    arch = reference_arch(mlp_t=True, pos_encodings="none")
    step_file, head = write_reference_run(tmp_path / "ref", tiny.data, arch, True, identifiers=5)
    spec = write_spec(tmp_path, tiny.data, max_steps=1, lr=1e-30, puzzle_emb_lr=0.0)
    run_dir = tmp_path / "run"
    code = main(["run", str(spec), "--out", str(run_dir), "--init-from", str(step_file)])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if "mean row" in line]
    assert len(lines) == 1 and "5 rows" in lines[0], err
    weights = read_checkpoint(run_dir / "checkpoints" / "step-00000001.pt")["model"]
    table = head.state_dict()["model.inner.puzzle_emb.weights"]
    assert torch.equal(weights["puzzle_emb.weights"], table.mean(0, keepdim=True))
    assert torch.equal(weights["lm_head.weight"], head.state_dict()["model.inner.lm_head.weight"])


def test_init_from_a_trm_run_takes_its_ema_weights(tiny, tmp_path, capsys):
    spec = write_spec(tmp_path, tiny.data, max_steps=2)
    first = tmp_path / "first"
    assert main(["run", str(spec), "--out", str(first)]) == 0
    spec = write_spec(tmp_path / "again", tiny.data, max_steps=1, lr=1e-30, puzzle_emb_lr=0.0)
    second = tmp_path / "second"
    assert main(["run", str(spec), "--out", str(second), "--init-from", str(first)]) == 0
    err = capsys.readouterr().err
    assert "EMA weights of trm checkpoint" in err
    source = read_checkpoint(first / "checkpoints" / "step-00000002.pt")
    _, model = restore_model(source, torch.device("cpu"))
    started = read_checkpoint(second / "checkpoints" / "step-00000001.pt")["model"]
    assert torch.equal(started["lm_head.weight"], model.state_dict()["lm_head.weight"])


def test_a_quickstart_like_run_exports_as_an_equivalent_the_reference_builds(
    tiny, tmp_path, capsys
):
    """puzzle_emb_ndim = 0 with puzzle_emb_len = 1: the reference cannot build it, so the
    export holds a zero puzzle table that never learns; the reference model built from the
    exported config gives trm's logits."""
    spec = write_spec(tmp_path, tiny.data, max_steps=2)
    spec.write_text(spec.read_text().replace("puzzle_emb_ndim = 16", "puzzle_emb_ndim = 0"))
    run_dir = tmp_path / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    out = tmp_path / "exported"
    args = ["export", str(run_dir), "--format", "reference", "--out", str(out), "--uncompiled"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "puzzle_emb_ndim = 0" in err and "stays zero" in err
    config = yaml.safe_load((out / "all_config.yaml").read_text())
    arch = config["arch"]
    assert arch["puzzle_emb_ndim"] == arch["hidden_size"] and arch["puzzle_emb_len"] == 1
    assert config["puzzle_emb_lr"] == 0 and config["puzzle_emb_weight_decay"] == 0
    assert arch["forward_dtype"] == "float32"  # the tiny spec trains in fp32
    head = ReferenceLossHead(arch, SEQ_LEN, VOCAB, 1)
    head.load_state_dict(torch.load(out / "step_2", weights_only=True))
    inputs = torch.from_numpy(held_out(tiny.data)["inputs"]).long()
    expected, _ = head.evaluate(inputs, torch.zeros(len(inputs), dtype=torch.long))
    torch.testing.assert_close(trm_logits(run_dir, inputs), expected, atol=1e-4, rtol=1e-4)


def test_an_exported_quickstart_like_run_seeds_the_same_spec_with_init_from(tiny, tmp_path, capsys):
    """The export's zero puzzle table stands for puzzle_emb_ndim = 0: the round trip through
    the reference's layout comes back to the run's own weights."""
    spec = write_spec(tmp_path, tiny.data, max_steps=2)
    spec.write_text(spec.read_text().replace("puzzle_emb_ndim = 16", "puzzle_emb_ndim = 0"))
    run_dir = tmp_path / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    out = tmp_path / "exported"
    assert main(["export", str(run_dir), "--format", "reference", "--out", str(out)]) == 0
    again = write_spec(tmp_path / "again", tiny.data, max_steps=1, lr=1e-30)
    again.write_text(again.read_text().replace("puzzle_emb_ndim = 16", "puzzle_emb_ndim = 0"))
    second = tmp_path / "second"
    code = main(["run", str(again), "--out", str(second), "--init-from", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "zero puzzle table" in err
    _, model = restore_model(
        read_checkpoint(run_dir / "checkpoints" / "step-00000002.pt"), torch.device("cpu")
    )
    started = read_checkpoint(second / "checkpoints" / "step-00000001.pt")["model"]
    assert torch.equal(started["lm_head.weight"], model.state_dict()["lm_head.weight"])


def test_the_model_built_from_an_imported_spec_has_the_reference_sizes(tiny, tmp_path, capsys):
    step_file, head = write_reference_run(tmp_path / "ref", tiny.data, reference_arch(), True)
    run_dir = tmp_path / "imported"
    assert main(["import", str(step_file), "--out", str(run_dir)]) == 0
    payload = read_checkpoint(run_dir / "checkpoints" / f"step-{STEP:08d}.pt")
    spec, _ = restore_model(payload, torch.device("cpu"))
    model = build_model(spec.arch, checkpoint_shape(payload))
    reference_count = sum(p.numel() for p in head.parameters())
    assert model.count_parameters() == reference_count
    assert payload["optimizers"] is None and payload["rng"] is None
    capsys.readouterr()
