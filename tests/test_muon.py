"""train.optimizer = "muon": Muon for the hidden weight matrices, AdamW for the rest, as Speed
is Confidence (arXiv 2601.19085) splits them; its update pinned against a hand-written Muon
step; its state counted exactly by the memory estimate; refused in one line without
torch.optim.Muon; a tiny run trains with it end to end."""

from __future__ import annotations

import math

import pytest
import torch

import trm
from tests.conftest import assert_one_line_error
from tests.tiny_run import TOTAL_STEPS, build_tiny_data, checkpoint_steps, summary, write_spec
from trm.cli.main import main
from trm.data.shape import DatasetShape
from trm.hardware import HardwareProfile
from trm.model import TinyRecursiveModel, build_optimizers
from trm.model.optim import ADAM_ATAN2
from trm.plugins.optimizers import muon as muon_plugin
from trm.plugins.planning import memory_estimator
from trm.runtime import RuntimeChoice
from trm.spec import ArchSpec, TrainSpec, load_spec, resolve_spec_path

MUON = muon_plugin.dense_optimizers()[0]
NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315  # the quintic Newton-Schulz coefficients


def tiny_model(**arch: object) -> TinyRecursiveModel:
    fields: dict[str, object] = dict(
        hidden_size=16,
        expansion=2.0,
        num_heads=2,
        L_layers=1,
        H_cycles=2,
        L_cycles=2,
        puzzle_emb_ndim=16,
        puzzle_emb_len=1,
    )
    fields.update(arch)
    torch.manual_seed(0)
    return TinyRecursiveModel(ArchSpec(**fields), 6, 5, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("mlp_t", [False, True])
def test_muon_takes_the_networks_matrices_and_adamw_the_embeddings_heads_and_biases(mlp_t):
    model = tiny_model(mlp_t=mlp_t, pos_encodings="learned" if mlp_t else "rope")
    optimizers = build_optimizers(model, TrainSpec(optimizer="muon"), MUON)
    sparse, adamw, muon = optimizers
    assert type(sparse).__name__ == "SignSGDSparse"  # the puzzle table keeps its sign-SGD
    assert isinstance(adamw, torch.optim.AdamW) and isinstance(muon, torch.optim.Muon)
    names = {id(p): n for n, p in model.named_parameters()}
    on_muon = {names[id(p)] for p in muon.param_groups[0]["params"]}
    on_adamw = {names[id(p)] for p in adamw.param_groups[0]["params"]}
    assert on_muon == {n for n in names.values() if n.startswith("net.")}
    assert on_adamw == {n for n in names.values() if not n.startswith("net.")}
    assert {"embed_tokens.weight", "lm_head.weight", "q_head.weight", "q_head.bias"} <= on_adamw
    assert all(p.ndim == 2 for p in muon.param_groups[0]["params"])


def test_each_side_takes_its_settings_and_its_own_base_learning_rate():
    train = TrainSpec(
        optimizer="muon",
        lr=1e-4,
        beta1=0.9,
        beta2=0.95,
        weight_decay=1.0,
        muon_lr=0.02,
        muon_momentum=0.6,
        muon_weight_decay=0.005,
        muon_ns_steps=3,
    )
    _, adamw, muon = build_optimizers(tiny_model(), train, MUON)
    group = muon.param_groups[0]
    assert (group["lr"], group["base_lr"], group["momentum"], group["nesterov"]) == (
        0.02,
        0.02,
        0.6,
        True,
    )
    assert (group["weight_decay"], group["ns_steps"], group["adjust_lr_fn"]) == (0.005, 3, None)
    group = adamw.param_groups[0]
    assert (group["lr"], group["base_lr"], group["betas"], group["weight_decay"]) == (
        1e-4,
        1e-4,
        (0.9, 0.95),
        1.0,
    )


def hand_written_muon_step(
    param: torch.Tensor,
    grad: torch.Tensor,
    buf: torch.Tensor,
    lr: float,
    wd: float,
    momentum: float,
    ns_steps: int,
) -> torch.Tensor:
    """One Muon update as the paper's code defines it: Nesterov momentum by lerp, the
    quintic Newton-Schulz orthogonalisation in bfloat16 on the wider-than-tall orientation,
    decoupled weight decay, and the step scaled by sqrt(max(1, rows / columns))."""
    buf.lerp_(grad, 1 - momentum)
    update = grad.lerp(buf, momentum)
    x = update.bfloat16()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(ns_steps):
        a = x @ x.T
        b = NS_B * a + NS_C * a @ a
        x = NS_A * x + b @ x
    if tall:
        x = x.T
    rows, cols = param.shape
    out = param * (1 - lr * wd)
    return out - lr * math.sqrt(max(1.0, rows / cols)) * x.to(param.dtype)


@pytest.mark.parametrize("shape", [(32, 8), (8, 32)])
def test_a_muon_update_is_the_papers_muon_step(shape):
    torch.manual_seed(1)
    param = torch.nn.Parameter(torch.randn(shape))
    expected_param, buf = param.detach().clone(), torch.zeros(shape)
    train = TrainSpec(muon_lr=0.02, muon_momentum=0.6, muon_weight_decay=0.005, muon_ns_steps=3)
    muon = muon_plugin.build_muon([("net.w", param)], train)[0]
    for _ in range(3):
        grad = torch.randn(shape)
        param.grad = grad.clone()
        muon.step()
        expected_param = hand_written_muon_step(expected_param, grad, buf, 0.02, 0.005, 0.6, 3)
        torch.testing.assert_close(param.detach(), expected_param, rtol=2e-2, atol=2e-3)
    assert not torch.allclose(param.detach(), expected_param * 0.5)


def test_the_estimate_counts_one_momentum_for_muons_matrices_and_two_moments_for_the_rest():
    spec = load_spec(resolve_spec_path("quickstart"))
    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    runtime = RuntimeChoice("cpu", "fp32", 2, False)

    def items(optimizer) -> dict[str, int]:
        found = memory_estimator.estimate_items(
            spec, HardwareProfile(), runtime, shape, process_baseline_bytes=0, optimizer=optimizer
        )
        return {item.name: item.bytes for item in found}

    model = TinyRecursiveModel(spec.arch, 16, 6, 1)
    net = sum(p.numel() for p in model.net.parameters())
    rest = sum(p.numel() for p in model.parameters()) - net
    assert items(MUON)["optimizer states"] == 4 * net + 8 * rest
    assert items(ADAM_ATAN2)["optimizer states"] == 8 * (net + rest)
    built = build_optimizers(model, TrainSpec(optimizer="muon"), MUON)
    for opt in built:  # one step, so every state exists: the count is what torch allocates
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = torch.ones_like(p)
    for opt in built[-2:]:
        opt.step()
    allocated = sum(
        t.numel() * t.element_size()
        for opt in built[-2:]
        for state in opt.state.values()
        for t in state.values()
        if t.ndim > 0
    )
    assert allocated == 4 * net + 8 * rest


def test_without_torch_optim_muon_a_spec_naming_it_is_one_line_naming_the_torch_needed(
    cli, tmp_path, monkeypatch
):
    monkeypatch.delattr(torch.optim, "Muon")
    run_dir = tmp_path / "run"
    result = cli("run", "quickstart", "--set", "train.optimizer=muon", "--out", run_dir)
    assert_one_line_error(
        result, "train.optimizer: 'muon' cannot be built here", "needs torch 2.9 or newer"
    )
    assert not run_dir.exists()
    assert cli("estimate", "quickstart").code == 0  # a spec that does not name it is untouched


def test_muon_settings_out_of_range_are_refused_naming_the_key(cli, tmp_path):
    result = cli("estimate", "quickstart", "--set", "train.muon_momentum=1.5")
    assert_one_line_error(result, "train.muon_momentum")
    result = cli("estimate", "quickstart", "--set", "train.muon_ns_steps=0")
    assert_one_line_error(result, "train.muon_ns_steps")


@pytest.mark.slow
def test_a_tiny_run_trains_with_muon_and_checkpoints_both_optimizers(tmp_path):
    data = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path / "muon", data, optimizer="muon", muon_lr=0.02)
    run_dir = tmp_path / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    assert summary(run_dir)["steps"] == TOTAL_STEPS
    newest = max(checkpoint_steps(run_dir))
    payload = torch.load(
        run_dir / "checkpoints" / f"step-{newest:08d}.pt", weights_only=True, map_location="cpu"
    )
    adamw_state, muon_state = payload["optimizers"][-2:]
    assert all(set(s) == {"momentum_buffer"} for s in muon_state["state"].values())
    assert all({"exp_avg", "exp_avg_sq"} <= set(s) for s in adamw_state["state"].values())
    assert trm.TrmError  # the package imports cleanly beside the plugin
