"""Activation checkpointing: the same numbers, fewer kept activations, chosen by the planner,
switched on by OOM recovery and carried across a resume."""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest
import torch

from tests.conftest import assert_one_line_error
from tests.test_backends import assert_close_at_scale
from tests.tiny_run import (
    GLOBAL_BATCH,
    TOTAL_STEPS,
    build_tiny_data,
    events,
    load_weights,
    write_spec,
)
from trm.cli.main import main
from trm.device.compile import compile_network
from trm.hardware import HardwareProfile
from trm.memory import MemoryEstimate, MemoryItem
from trm.model import ACTLoss, TinyRecursiveModel
from trm.model.trm import RecursiveNet
from trm.plugins.backends import cpu
from trm.plugins.operations import memory_guard
from trm.plugins.planning import tiers
from trm.spec import ArchSpec, RunSpec, RuntimeSpec, TrainSpec

GIB = 2**30


def arch_of(mlp_t: bool, **overrides) -> ArchSpec:
    fields = {
        "hidden_size": 32,
        "expansion": 2.0,
        "num_heads": 2,
        "L_layers": 2,
        "H_cycles": 2,
        "L_cycles": 3,
        "mlp_t": mlp_t,
        "pos_encodings": "none" if mlp_t else "rope",
        "puzzle_emb_ndim": 32,
        "puzzle_emb_len": 2,
        "no_ACT_continue": False,  # the bootstrapped target pass runs too
    }
    return ArchSpec(**{**fields, **overrides})


def batch_of(size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "inputs": torch.randint(0, 6, (size, 9), generator=gen),
        "labels": torch.randint(0, 6, (size, 9), generator=gen),
        "puzzle_identifiers": torch.randint(0, 3, (size,), generator=gen),
    }


def train_step(model: TinyRecursiveModel, data, autocast: bool = False):
    """One supervision step and backward from a fixed RNG state: (carry, outputs, grads)."""
    torch.manual_seed(7)
    model.zero_grad(set_to_none=True)
    cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast)
    with cast:
        carry, out = model(model.initial_carry(data), data)
    loss, _ = ACTLoss.compute(out, carry.current_data["labels"], carry.halted)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return carry, out, grads


def pair(arch: ArchSpec, compiled: bool = False) -> tuple[TinyRecursiveModel, TinyRecursiveModel]:
    """Two models with the same weights, one keeping its activations, one recomputing them."""
    torch.manual_seed(0)
    keeps = TinyRecursiveModel(arch, 9, 6, 3).train()
    recomputes = TinyRecursiveModel(arch, 9, 6, 3).train()
    recomputes.load_state_dict(keeps.state_dict())
    with torch.no_grad():
        keeps.puzzle_emb.weights.normal_()
        recomputes.puzzle_emb.weights.copy_(keeps.puzzle_emb.weights)
    recomputes.set_activation_checkpointing(True)
    if compiled:  # as a run compiles: the whole recursion region
        compile_network(keeps, cpu.CPU)
        compile_network(recomputes, cpu.CPU)
    return keeps, recomputes


@pytest.mark.parametrize("mlp_t", [True, False], ids=["mlp_t", "attention"])
def test_float32_on_the_cpu_is_bit_identical_with_and_without(mlp_t):
    keeps, recomputes = pair(arch_of(mlp_t))
    data = batch_of(4)
    (c1, o1, g1), (c2, o2, g2) = train_step(keeps, data), train_step(recomputes, data)
    for key in o1:
        assert torch.equal(o1[key], o2[key]), key
    assert torch.equal(c1.z_H, c2.z_H) and torch.equal(c1.z_L, c2.z_L)
    assert torch.equal(c1.halted, c2.halted)
    assert g1.keys() == g2.keys() and g1
    for name in g1:
        assert torch.equal(g1[name], g2[name]), name


@pytest.mark.parametrize("mlp_t", [True, False], ids=["mlp_t", "attention"])
def test_bf16_autocast_agrees_within_rounding(mlp_t):
    keeps, recomputes = pair(arch_of(mlp_t, H_cycles=1, L_cycles=2))
    data = batch_of(2)
    (_, o1, g1), (_, o2, g2) = (train_step(m, data, autocast=True) for m in (keeps, recomputes))
    logits1, logits2 = o1["logits"].detach().float(), o2["logits"].detach().float()
    scale = float(logits1.abs().max())
    error = float((logits1 - logits2).abs().max())
    assert error <= 1e-2 * scale, f"logits off by {error:.3g} at scale {scale:.3g}"
    for name in g1:
        scale = float(g1[name].abs().max())
        error = float((g1[name] - g2[name]).abs().max())
        assert error <= 1e-2 * scale + 1e-6, f"{name}: off by {error:.3g} at scale {scale:.3g}"


@pytest.mark.slow
def test_composes_with_torch_compile():
    keeps, recomputes = pair(arch_of(True, H_cycles=1, L_cycles=1, L_layers=1), compiled=True)
    data = batch_of(2)
    try:
        (_, o1, g1), (_, o2, g2) = train_step(keeps, data), train_step(recomputes, data)
    finally:
        torch._dynamo.reset()  # leave no compiled code for later tests of this process
    assert_close_at_scale(o2["logits"], o1["logits"], "logits")
    for name in g1:
        assert_close_at_scale(g2[name], g1[name], name)


def test_backward_runs_the_grad_carrying_calls_once_more_and_nothing_else(monkeypatch):
    arch = arch_of(False)
    keeps, recomputes = pair(arch)
    count = [0]
    forward = RecursiveNet.forward

    def counted(self, *args, **kwargs):
        count[0] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(RecursiveNet, "forward", counted)
    calls = {}
    for name, model in (("keeps", keeps), ("recomputes", recomputes)):
        count[0] = 0
        train_step(model, batch_of(2))
        calls[name] = count[0]
    in_forward = 2 * arch.H_cycles * (arch.L_cycles + 1)  # with the bootstrapped target pass
    assert calls["keeps"] == in_forward
    assert calls["recomputes"] == in_forward + arch.L_cycles + 1


def test_without_grad_nothing_is_checkpointed():
    _, recomputes = pair(arch_of(True))
    recomputes.eval()
    data = batch_of(2)
    with torch.no_grad():
        _, out = recomputes(recomputes.initial_carry(data), data)
    assert out["logits"].grad_fn is None


def test_an_unknown_setting_is_one_line_naming_the_key(cli):
    result = cli("estimate", "quickstart", "--set", "runtime.activation_checkpointing=sometimes")
    assert_one_line_error(result, "runtime.activation_checkpointing", "'auto', 'on', 'off'")


# ----------------------------------------------------------------------------- the planner


def halving_estimate(budget: int, per_row: int, fixed: int = GIB // 4):
    """A fake estimator: fixed + per_row x micro-batch, a tenth of it with recomputation."""

    def make(spec: RunSpec) -> MemoryEstimate:
        micro = spec.runtime.micro_batch_size or spec.train.global_batch_size
        row = per_row // 10 if spec.runtime.activation_checkpointing == "on" else per_row
        items = (MemoryItem("fixed", fixed), MemoryItem("activations", row * micro))
        return MemoryEstimate(items=items, host_budget_bytes=budget, remake=make)

    return make


def on_a_gpu(budget: int, per_row: int):
    """``halving_estimate`` held against a device budget (a GPU with its own memory)."""
    host = halving_estimate(budget, per_row)

    def make(spec: RunSpec) -> MemoryEstimate:
        items = tuple(attrs.evolve(i, location="device") for i in host(spec).items)
        return MemoryEstimate(
            items=items, host_budget_bytes=64 * GIB, device_budget_bytes=budget, remake=make
        )

    return make


def spec_of(batch: int, setting: str = "auto") -> RunSpec:
    return RunSpec(
        arch=ArchSpec(hidden_size=256, num_heads=4, H_cycles=3, L_cycles=4),
        train=TrainSpec(global_batch_size=batch, max_steps=1),
        runtime=RuntimeSpec(precision="fp32", threads=1, activation_checkpointing=setting),
    )


def test_recomputation_costs_one_more_forward_of_the_grad_carrying_calls():
    # H 3 x (L 4 + 1) forward calls, 2 x 5 backward: 5 more on 25
    assert tiers.recompute_cost(spec_of(8)) == pytest.approx(5 / 25)


def test_a_gpu_tier_turns_it_on_for_a_larger_faster_micro_batch_and_says_so():
    make = on_a_gpu(16 * GIB, GIB)  # without: about 10 rows fit the tier; with: 64 (all)
    spec = spec_of(64)
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    assert adapted.runtime.activation_checkpointing == "on"
    assert adapted.runtime.micro_batch_size == 64 and adapted.train.global_batch_size == 64
    (change,) = [c for c in changes if c.key == "runtime.activation_checkpointing"]
    without = tiers.adapt(spec_of(64, "off"), HardwareProfile(), make(spec), "balanced")[0]
    off_micro = without.runtime.micro_batch_size
    assert 1 < off_micro < 64
    assert f"micro-batch 64 with recomputation instead of {off_micro} without" in change.reason
    assert "samples/s" in change.reason


def test_a_cpu_tier_keeps_activations_when_the_micro_batch_is_already_fast():
    make = halving_estimate(16 * GIB, GIB)  # ~10 rows fit without: a CPU is near its best there
    spec = spec_of(64)
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    assert adapted.runtime.activation_checkpointing == "auto"
    assert 4 <= adapted.runtime.micro_batch_size < 64
    assert not [c for c in changes if c.key == "runtime.activation_checkpointing"]


def test_recomputation_comes_before_a_smaller_model():
    make = halving_estimate(4 * GIB, 8 * GIB)  # a row needs 8 GiB, 0.8 GiB with recomputation
    spec = spec_of(16)
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    assert adapted.arch == spec.arch
    assert adapted.runtime.activation_checkpointing == "on"
    assert 1 <= adapted.runtime.micro_batch_size < 16  # 4 rows would fill the whole budget
    assert not any(tiers.SHRUNK in c.reason for c in changes)


@pytest.mark.parametrize("setting", ["on", "off"])
def test_an_explicit_setting_is_never_changed_by_a_tier(setting):
    make = on_a_gpu(16 * GIB, GIB)
    spec = spec_of(64, setting)
    adapted, _ = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    assert adapted.runtime.activation_checkpointing == setting


def test_estimate_and_analyze_show_both_options(cli):
    result = cli("estimate", "quickstart", "--json")
    assert result.code == 0, result.err
    import json

    options = json.loads(result.out)["activation_checkpointing"]
    assert set(options) == {"off", "on"}
    assert options["on"]["peak_bytes"] < options["off"]["peak_bytes"]
    text = cli("estimate", "quickstart")
    assert "activation checkpointing off:" in text.out and "on:" in text.out


# ----------------------------------------------------------------------------- a run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("actckpt")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, micro=GLOBAL_BATCH, checkpoint_interval_steps=2)
    reference = base / "reference"
    assert main(["run", str(spec), "--out", str(reference)]) == 0
    return SimpleNamespace(base=base, data=data, spec=spec, reference=reference)


@pytest.fixture(autouse=True)
def quiet_memory(monkeypatch):
    monkeypatch.setattr(
        memory_guard, "read_pressure", lambda *_args: memory_guard.MemoryPressure(host=0.3)
    )


def test_resume_after_an_oom_switch_keeps_recomputing_and_is_exact(
    tiny, tmp_path, cli, monkeypatch
):
    """Stopped after step 4 with recomputation switched on at step 3, the run resumes with it
    on (the checkpoint says so: the fault that needs it would fire again otherwise) and
    ends with the reference's weights bit for bit."""
    run_dir = tmp_path / "run"
    monkeypatch.setenv("TRM_FAULTS", "oom-keep@3:4")
    first = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults", "--max-steps", "4")
    assert first.code == 0, first.err
    payload = torch.load(run_dir / "checkpoints" / "step-00000004.pt", weights_only=True)
    assert payload["activation_checkpointing"] is True
    second = cli("run", tiny.spec, "--out", run_dir, "--plugins", "faults")
    assert second.code == 0, second.err
    assert [e["step"] for e in events(run_dir, "activation_checkpointing")] == [3]
    assert [e["step"] for e in events(run_dir, "out_of_memory")] == [3]
    final = f"step-{TOTAL_STEPS:08d}.pt"
    got = load_weights(run_dir / "checkpoints" / final)
    for name, tensor in load_weights(tiny.reference / "checkpoints" / final).items():
        assert torch.equal(got[name], tensor), name
