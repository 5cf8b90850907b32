"""Gradient accumulation is exact: k micro-batches give the full batch's gradient and carry."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trm.model.layers
import trm.model.trm
from trm.control import accumulation_steps, fit_micro_batch
from trm.device.contract import host_placement
from trm.loop.step import SUM_KEYS, accumulate_gradients
from trm.model import TinyRecursiveModel, TRMCarry
from trm.spec import ArchSpec

CPU = torch.device("cpu")


def _rms_norm_in_input_dtype(x: torch.Tensor, eps: float, dim: int = -1) -> torch.Tensor:
    return x * torch.rsqrt(x.square().mean(dim, keepdim=True) + eps)


@pytest.fixture(autouse=True)
def float64_on_one_thread():
    """Exact-enough arithmetic: float64 throughout, so float32 rounding (which summing in
    another order changes) cannot hide or fake a difference; the model's RMS norm, which
    always computes in float32, runs in the input's dtype here. One thread: tiny matrices
    run fastest so."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    patched = (trm.model.layers, trm.model.trm)
    originals = [module.rms_norm for module in patched]
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    for module in patched:
        module.rms_norm = _rms_norm_in_input_dtype
    yield
    for module, original in zip(patched, originals, strict=True):
        module.rms_norm = original
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)


def _clone(carry: TRMCarry) -> TRMCarry:
    return TRMCarry.from_state_dict(carry.state_dict())


def _random_problem(data: st.DataObject):
    draw = data.draw
    hidden = draw(st.sampled_from([8, 16]), label="hidden")
    mlp_t = draw(st.booleans(), label="mlp_t")
    arch = ArchSpec(
        hidden_size=hidden,
        expansion=2.0,
        num_heads=2,
        L_layers=draw(st.integers(1, 2), label="L_layers"),
        H_cycles=draw(st.integers(1, 3), label="H_cycles"),
        L_cycles=draw(st.integers(1, 2), label="L_cycles"),
        pos_encodings="none" if mlp_t else draw(st.sampled_from(["rope", "learned", "none"])),
        mlp_t=mlp_t,
        puzzle_emb_ndim=draw(st.sampled_from([0, hidden]), label="puzzle_emb_ndim"),
        puzzle_emb_len=1,
        halt_max_steps=draw(st.integers(1, 4), label="halt_max_steps"),
        halt_exploration_prob=draw(st.sampled_from([0.0, 0.5, 1.0]), label="explore"),
        no_ACT_continue=draw(st.booleans(), label="no_ACT_continue"),
        loss=draw(st.sampled_from(["stablemax", "softmax"]), label="loss"),
    )
    batch_size = draw(st.integers(2, 12), label="batch")
    micro = draw(st.integers(1, batch_size), label="micro_batch")
    seq_len, vocab, identifiers = draw(st.integers(3, 8), label="seq_len"), 6, 4
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16), label="seed"))
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator)))
    model = TinyRecursiveModel(arch, seq_len, vocab, identifiers).train()
    with torch.no_grad():  # a Q head that halts some rows and not others
        model.q_head.weight.normal_(0.0, 0.5, generator=generator)
        model.q_head.bias.normal_(0.0, 0.5, generator=generator)
        if model.puzzle_emb is not None:
            model.puzzle_emb.weights.normal_(0.0, 0.3, generator=generator)

    def batch() -> dict[str, torch.Tensor]:
        labels = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)
        ignored = torch.rand(batch_size, seq_len, generator=generator) < 0.2
        return {
            "inputs": torch.randint(0, vocab, (batch_size, seq_len), generator=generator),
            "labels": labels.masked_fill(ignored, -100),
            "puzzle_identifiers": torch.randint(0, identifiers, (batch_size,), generator=generator),
        }

    first = batch()
    carry = model.initial_carry(first)
    with torch.no_grad():  # a carry mid-run: some rows halted, some part-way with state
        carry.halted = torch.rand(batch_size, generator=generator) < 0.5
        carry.steps = torch.randint(
            0, max(arch.halt_max_steps, 1), (batch_size,), generator=generator, dtype=torch.int32
        )
        carry.z_H = torch.randn(carry.z_H.shape, generator=generator)
        carry.z_L = torch.randn(carry.z_L.shape, generator=generator)
        carry.current_data = batch()
    return model, arch, carry, [first, batch()], micro


def assert_close_to(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal within float64 rounding, relative to the tensor's scale (not element by element:
    summing in another order moves near-zero entries by more than their own size). A lost or
    doubled micro-batch would be off by a sizeable fraction of the scale."""
    assert actual.dtype == expected.dtype
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    error = float((actual - expected).abs().max()) if expected.numel() else 0.0
    assert error <= 1e-9 * scale + 1e-12, f"{what}: off by {error:.3g} at scale {scale:.3g}"


def _step(model, arch, carry, batch, min_halt, micro):
    """Gradients (dense and per-puzzle sparse), the committed carry and the sums."""
    model.zero_grad(set_to_none=True)
    if model.puzzle_emb is not None:
        model.puzzle_emb.clear_pending()
    before = _clone(carry)
    pieces, sums = accumulate_gradients(
        model,
        carry,
        batch,
        min_halt_steps=min_halt,
        micro_batch_size=micro,
        loss=arch.loss,
        divisor=carry.batch_size,
        placement=host_placement(),
    )
    for key, value in before.state_dict().items():  # the input carry is left untouched
        assert torch.equal(value, carry.state_dict()[key]), key
    committed = _clone(carry)
    for rows, piece in pieces:
        committed.assign_rows(rows, piece)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    if model.puzzle_emb is not None:
        table = torch.zeros_like(model.puzzle_emb.weights)
        for ids, local in model.puzzle_emb.pending:
            if local.grad is not None:
                table.index_add_(0, ids, local.grad)
        grads["puzzle_emb (sparse)"] = table
    return grads, committed, dict(zip(SUM_KEYS, sums.tolist(), strict=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_gradient_over_k_micro_batches_equals_the_full_batch_gradient(data):
    model, arch, carry, batches, micro = _random_problem(data)
    size = carry.batch_size
    full_carry, micro_carry = _clone(carry), _clone(carry)
    for batch in batches:  # two steps: the carry written by the first feeds the second
        min_halt = model.draw_min_halt_steps(size, CPU)
        full_grads, full_carry, full_sums = _step(model, arch, full_carry, batch, min_halt, size)
        micro_grads, micro_carry, micro_sums = _step(
            model, arch, micro_carry, batch, min_halt, micro
        )
        assert full_grads.keys() == micro_grads.keys()
        assert full_grads, "the step produced no gradient"
        for name, grad in full_grads.items():
            assert_close_to(micro_grads[name], grad, name)
        for key, value in full_sums.items():
            # the loss code reports its sums in float32
            assert abs(micro_sums[key] - value) <= 1e-6 * max(1.0, abs(value)), key
        for key, value in full_carry.state_dict().items():
            other = micro_carry.state_dict()[key]
            if value.is_floating_point():
                assert_close_to(other, value, key)
            else:
                assert torch.equal(other, value), key


@given(size=st.integers(-4, 1000), global_batch=st.integers(1, 768))
def test_micro_batch_is_clamped_to_the_global_batch_and_steps_cover_it(size, global_batch):
    fitted = fit_micro_batch(size, global_batch)
    assert fitted == max(1, min(size, global_batch))
    steps = accumulation_steps(fitted, global_batch)
    assert (steps - 1) * fitted < global_batch <= steps * fitted
