"""Contracts of the TRM network, its losses, optimizers and EMA (tiny configs, CPU)."""

from __future__ import annotations

import math

import pytest
import torch
from attrs import evolve

from trm.model import (
    EMA,
    ACTLoss,
    AdamATan2,
    SignSGDSparse,
    SparsePuzzleEmbedding,
    TinyRecursiveModel,
    TRMCarry,
    build_optimizers,
    lr_at_step,
    stablemax_cross_entropy,
    stablemax_log_probs,
)
from trm.spec import ArchSpec, TrainSpec

SEQ_LEN, VOCAB, NUM_IDS = 6, 5, 3


def tiny_arch(**overrides: object) -> ArchSpec:
    fields: dict[str, object] = dict(
        hidden_size=16,
        expansion=2.0,
        num_heads=2,
        L_layers=1,
        H_cycles=3,
        L_cycles=2,
        pos_encodings="rope",
        mlp_t=False,
        puzzle_emb_ndim=16,
        puzzle_emb_len=2,
        halt_max_steps=4,
        halt_exploration_prob=0.0,
    )
    fields.update(overrides)
    return ArchSpec(**fields)  # type: ignore[arg-type]


def tiny_model(**overrides: object) -> TinyRecursiveModel:
    return TinyRecursiveModel(tiny_arch(**overrides), SEQ_LEN, VOCAB, NUM_IDS)


def make_batch(size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, VOCAB, (size, SEQ_LEN), generator=gen)
    labels[:, 0] = -100
    return {
        "inputs": torch.randint(0, VOCAB, (size, SEQ_LEN), generator=gen),
        "labels": labels,
        "puzzle_identifiers": torch.randint(0, NUM_IDS, (size,), generator=gen),
    }


def rows_of(batch: dict[str, torch.Tensor], rows: slice) -> dict[str, torch.Tensor]:
    return {k: v[rows] for k, v in batch.items()}


def loaded_carry(model: TinyRecursiveModel, batch: dict[str, torch.Tensor]) -> TRMCarry:
    """A carry holding ``batch`` at the initial state, with no row halted."""
    carry = model.reset_carry(model.initial_carry(batch), batch)
    carry.halted = torch.zeros_like(carry.halted)
    return carry


# ------------------------------------------------------------------ recursion and gradients


def test_gradients_flow_only_through_last_H_cycle() -> None:
    torch.manual_seed(0)
    full = tiny_model(H_cycles=3)
    with torch.no_grad():
        full.puzzle_emb.weights.normal_()
    one = TinyRecursiveModel(evolve(full.arch, H_cycles=1), SEQ_LEN, VOCAB, NUM_IDS)
    one.load_state_dict(full.state_dict())
    batch = make_batch(2)
    start = loaded_carry(full, batch)
    weight = torch.randn(2, SEQ_LEN, VOCAB)

    def objective(out: dict[str, torch.Tensor]) -> torch.Tensor:
        return (out["logits"] * weight).sum() + out["q_halt_logits"].sum()

    # The H-1 no-grad cycles of `full` are two whole steps of a 1-cycle model, detached.
    detached = start
    with torch.no_grad():
        for _ in range(2):
            detached, _ = one(detached, batch)
            detached.halted = torch.zeros_like(detached.halted)

    _, out_full = full(start, batch)
    objective(out_full).backward()
    full_puzzle_grad = full.puzzle_emb.local_weights.grad
    _, out_one = one(detached, batch)
    objective(out_one).backward()

    torch.testing.assert_close(out_full["logits"], out_one["logits"])
    for (name, p_full), p_one in zip(full.named_parameters(), one.parameters(), strict=True):
        assert p_full.grad is not None, name
        torch.testing.assert_close(p_full.grad, p_one.grad, msg=name)
    torch.testing.assert_close(full_puzzle_grad, one.puzzle_emb.local_weights.grad)


def test_no_grad_cycles_produce_tensors_without_grad() -> None:
    arch = tiny_arch(H_cycles=3, L_cycles=2)
    model = TinyRecursiveModel(arch, SEQ_LEN, VOCAB, NUM_IDS)
    seen: list[bool] = []
    model.net.register_forward_hook(lambda _m, _i, out: seen.append(out.requires_grad))
    batch = make_batch(2)
    model(loaded_carry(model, batch), batch)
    per_cycle = arch.L_cycles + 1
    assert seen == [False] * (arch.H_cycles - 1) * per_cycle + [True] * per_cycle


# ------------------------------------------------------------------ carry and ACT


def test_halted_row_is_reset_and_reloaded_while_others_keep_state() -> None:
    torch.manual_seed(1)
    model = tiny_model().eval()
    first, second = make_batch(2, seed=1), make_batch(2, seed=2)
    carry, _ = model(model.initial_carry(first), first)
    carry.halted = torch.tensor([True, False])

    reset = model.reset_carry(carry, second)
    torch.testing.assert_close(reset.z_H[0], model.H_init.expand_as(reset.z_H[0]))
    torch.testing.assert_close(reset.z_L[0], model.L_init.expand_as(reset.z_L[0]))
    torch.testing.assert_close(reset.z_H[1], carry.z_H[1])
    torch.testing.assert_close(reset.z_L[1], carry.z_L[1])
    assert reset.steps.tolist() == [0, 1]

    stepped, out = model(carry, second)
    assert stepped.steps.tolist() == [1, 2]
    for key in first:
        assert torch.equal(stepped.current_data[key][0], second[key][0]), key
        assert torch.equal(stepped.current_data[key][1], first[key][1]), key
    # Row 0 now equals a fresh start on the new row.
    fresh_batch = rows_of(second, slice(0, 1))
    fresh, fresh_out = model(model.initial_carry(fresh_batch), fresh_batch)
    torch.testing.assert_close(stepped.z_H[:1], fresh.z_H)
    torch.testing.assert_close(out["logits"][:1], fresh_out["logits"])


def test_eval_halts_exactly_at_halt_max_steps_even_when_q_says_halt() -> None:
    model = tiny_model(halt_max_steps=3).eval()
    with torch.no_grad():
        model.q_head.bias.fill_(5.0)  # Q votes "halt" from the first step
    batch = make_batch(3)
    carry = model.initial_carry(batch)
    halted_per_step = []
    for _ in range(3):
        carry, _ = model(carry, batch)
        halted_per_step.append(carry.halted.tolist())
    assert halted_per_step == [[False] * 3, [False] * 3, [True] * 3]
    assert carry.steps.tolist() == [3, 3, 3]

    model.train()
    carry, _ = model(model.initial_carry(batch), batch)
    assert carry.halted.all()  # training honours Q (exploration is off)


def test_q_continue_target_only_in_training_without_no_ACT_continue() -> None:
    model = tiny_model(no_ACT_continue=False)
    batch = make_batch(2)
    _, out = model(model.initial_carry(batch), batch)
    target = out["target_q_continue"]
    assert target.shape == (2,) and not target.requires_grad
    assert ((target > 0) & (target < 1)).all()
    model.eval()
    _, out = model(model.initial_carry(batch), batch)
    assert "target_q_continue" not in out


def test_micro_batch_split_of_carry_matches_whole_batch() -> None:
    torch.manual_seed(2)
    model = tiny_model().eval()
    batch = make_batch(4)
    whole, _ = model(model.initial_carry(batch), batch)
    whole, _ = model(whole, batch)

    split = model.initial_carry(batch)
    for _ in range(2):
        for rows in (slice(0, 2), slice(2, 4)):
            part, _ = model(split.index_rows(rows), rows_of(batch, rows))
            split.assign_rows(rows, part)
    restored = TRMCarry.from_state_dict(split.state_dict())
    torch.testing.assert_close(restored.z_H, whole.z_H)
    assert torch.equal(restored.steps, whole.steps)
    assert torch.equal(restored.current_data["labels"], whole.current_data["labels"])


def test_zero_prefix_without_puzzle_embedding_runs() -> None:
    model = tiny_model(puzzle_emb_ndim=0, puzzle_emb_len=3, pos_encodings="learned")
    batch = make_batch(2)
    carry, out = model(model.initial_carry(batch), batch)
    assert model.puzzle_emb is None and model.puzzle_embedding_numel() == 0
    assert carry.z_H.shape == (2, 3 + SEQ_LEN, 16)
    assert out["logits"].shape == (2, SEQ_LEN, VOCAB)


@pytest.mark.parametrize(("pos", "mlp_t"), [("rope", False), ("learned", True), ("none", False)])
def test_model_runs_forward_and_backward_under_bf16_autocast(pos: str, mlp_t: bool) -> None:
    model = tiny_model(pos_encodings=pos, mlp_t=mlp_t)
    batch = make_batch(2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        carry, out = model(model.initial_carry(batch), batch)
        loss, _ = ACTLoss.compute(out, carry.current_data["labels"], carry.halted)
    assert out["logits"].dtype == torch.bfloat16
    assert out["q_halt_logits"].dtype == torch.float32
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ------------------------------------------------------------------ sizes


@pytest.mark.parametrize(
    ("mlp_t", "pos", "expected"), [(True, "none", 5_000_000), (False, "rope", 7_000_000)]
)
def test_paper_sudoku_configs_have_the_published_parameter_counts(
    mlp_t: bool, pos: str, expected: int
) -> None:
    arch = ArchSpec(
        hidden_size=512,
        expansion=4.0,
        num_heads=8,
        L_layers=2,
        mlp_t=mlp_t,
        pos_encodings=pos,
        puzzle_emb_ndim=512,
        puzzle_emb_len=16,
    )
    model = TinyRecursiveModel(arch, seq_len=81, vocab_size=11, num_puzzle_identifiers=1)
    assert abs(model.count_parameters() - expected) <= 0.1 * expected
    assert model.puzzle_embedding_numel() == 512


# ------------------------------------------------------------------ losses


def test_stablemax_matches_hand_computation_and_normalises() -> None:
    logits = torch.tensor([[-2.0, 0.0, 1.5], [-0.5, -3.0, 4.0]])
    s = torch.tensor([[1 / 3, 1.0, 2.5], [1 / 1.5, 1 / 4, 5.0]], dtype=torch.float64)
    expected = torch.log(s / s.sum(-1, keepdim=True))
    log_probs = stablemax_log_probs(logits)
    assert log_probs.dtype == torch.float64
    torch.testing.assert_close(log_probs, expected)

    random_logits = torch.randn(4, 7, 11) * 10
    total = stablemax_log_probs(random_logits).exp().sum(-1)
    torch.testing.assert_close(total, torch.ones_like(total))

    labels = torch.tensor([[2, -100], [1, 0]])
    loss = stablemax_cross_entropy(logits.unsqueeze(1).expand(2, 2, 3), labels)
    assert loss[0, 1] == 0
    torch.testing.assert_close(loss[0, 0], -expected[0, 2].float())
    torch.testing.assert_close(loss[1, 0], -expected[1, 1].float())


def test_act_loss_sums_per_row_means_and_counts_halted_rows() -> None:
    labels = torch.tensor([[1, 2, -100], [0, 1, 2], [-100, -100, -100]])
    logits = torch.full((3, 3, 4), -5.0)
    logits[0, 0, 1] = logits[0, 1, 2] = 5.0  # row 0 fully right
    logits[1, 0, 0] = 5.0  # row 1: one of three right
    outputs = {
        "logits": logits,
        "q_halt_logits": torch.tensor([1.0, -1.0, 0.5]),
        "q_continue_logits": torch.zeros(3),
    }
    halted = torch.tensor([True, True, True])
    steps = torch.tensor([2, 3, 4])
    loss, metrics = ACTLoss.compute(outputs, labels, halted, "softmax", steps=steps)
    assert metrics["count"] == 2  # row 2 has no labels
    assert metrics["exact_correct"] == 1
    torch.testing.assert_close(metrics["cell_correct"], torch.tensor(1.0 + 1 / 3))
    assert metrics["q_halt_correct"] == 2
    assert metrics["steps"] == 5
    token = torch.nn.functional.cross_entropy(
        logits.reshape(-1, 4), labels.reshape(-1), reduction="none"
    ).view(3, 3)
    lm = token[0].sum() / 2 + token[1].sum() / 3
    q_target = torch.tensor([1.0, 0.0, 1.0])  # a row with no labels counts as correct
    q = torch.nn.functional.binary_cross_entropy_with_logits(
        outputs["q_halt_logits"], q_target, reduction="sum"
    )
    torch.testing.assert_close(loss, lm + 0.5 * q)


# ------------------------------------------------------------------ optimizers


def test_sign_sgd_updates_only_touched_rows_with_sign_of_summed_grad() -> None:
    torch.manual_seed(3)
    emb = SparsePuzzleEmbedding(5, 3)
    with torch.no_grad():
        emb.weights.normal_()
    before = emb.weights.clone()
    opt = SignSGDSparse(emb, lr=0.1, weight_decay=0.5)
    g1, g2 = torch.randn(3, 3), torch.randn(2, 3)
    # Two micro-batches of different sizes accumulate into one step.
    (emb(torch.tensor([1, 3, 1])) * g1).sum().backward()
    (emb(torch.tensor([3, 4])) * g2).sum().backward()
    opt.step()

    expected = before.clone()
    for row, grad in ((1, g1[0] + g1[2]), (3, g1[1] + g2[0]), (4, g2[1])):
        expected[row] = before[row] * (1 - 0.1 * 0.5) - 0.1 * grad.sign()
    torch.testing.assert_close(emb.weights, expected)
    assert torch.equal(emb.weights[[0, 2]], before[[0, 2]])

    opt.zero_grad()
    opt.step()  # nothing recorded: no change
    torch.testing.assert_close(emb.weights, expected)
    emb.eval()
    assert not emb(torch.tensor([1])).requires_grad and not emb.pending


def test_adam_atan2_matches_formula_and_needs_no_eps() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = AdamATan2([p], lr=0.1, betas=(0.9, 0.95), weight_decay=0.1)
    p.grad = torch.tensor([2.0])
    opt.step()
    # p(1 - lr wd) - lr/(1 - b1) * atan2(m, sqrt(v / (1 - b2)))
    expected = 1.0 * (1 - 0.01) - 0.1 / 0.1 * math.atan2(0.1 * 2.0, math.sqrt(0.05 * 4.0 / 0.05))
    torch.testing.assert_close(p.detach(), torch.tensor([expected]))

    zero = torch.nn.Parameter(torch.tensor([0.5, -0.5]))
    opt = AdamATan2([zero], lr=0.1, weight_decay=0.0)
    for grad in (0.0, 1e-30):  # zero history, then a gradient far below any eps
        zero.grad = torch.full_like(zero, grad)
        before = zero.detach().clone()
        opt.step()
        change = (zero.detach() - before).abs()
        assert torch.isfinite(zero).all()
        assert (change <= 0.1 / (1 - 0.9**2) * math.pi / 2 + 1e-6).all()
        if grad == 0.0:
            assert torch.equal(change, torch.zeros(2))


def test_adam_atan2_decreases_a_quadratic() -> None:
    torch.manual_seed(4)
    target = torch.randn(8)
    p = torch.nn.Parameter(torch.zeros(8))
    opt = AdamATan2([p], lr=0.05, weight_decay=0.0)
    start = ((p - target) ** 2).sum().item()
    for _ in range(200):
        opt.zero_grad()
        loss = ((p - target) ** 2).sum()
        loss.backward()
        opt.step()
    assert ((p - target) ** 2).sum().item() < 0.01 * start


@pytest.mark.parametrize("name", ["adam_atan2", "adamw"])
def test_build_optimizers_puts_table_under_sign_sgd_and_params_under_dense(name: str) -> None:
    model = tiny_model()
    train = TrainSpec(optimizer=name, lr=3e-4, puzzle_emb_lr=1e-2)
    sparse, dense = build_optimizers(model, train)
    assert isinstance(sparse, SignSGDSparse) and sparse.param_groups[0]["base_lr"] == 1e-2
    assert sum(p.numel() for g in dense.param_groups for p in g["params"]) == (
        model.count_parameters()
    )
    assert dense.param_groups[0]["base_lr"] == 3e-4
    assert len(build_optimizers(tiny_model(puzzle_emb_ndim=0), train)) == 1


def test_lr_schedule_warmup_and_cosine_endpoints() -> None:
    train = TrainSpec(lr=1.0, lr_warmup_steps=10, lr_min_ratio=0.1)
    at = [lr_at_step(s, train, total_steps=110) for s in (0, 5, 10, 60, 110, 200)]
    assert at[:3] == pytest.approx([0.0, 0.5, 1.0])
    assert at[3] == pytest.approx(0.1 + 0.9 * 0.5)
    assert at[4] == pytest.approx(0.1) and at[5] == pytest.approx(0.1)
    assert lr_at_step(10, train, 110, base_lr=0.01) == pytest.approx(0.01)


# ------------------------------------------------------------------ EMA


def test_ema_follows_its_recurrence_and_swaps_weights_in_and_out() -> None:
    model = tiny_model()
    ema = EMA(model, rate=0.9)
    weight, table = model.lm_head.weight, model.puzzle_emb.weights
    w0 = weight.detach().clone()
    with torch.no_grad():
        weight.add_(1.0)
        table.add_(2.0)
    w1, t1 = weight.detach().clone(), table.clone()
    ema.update()
    with torch.no_grad():
        weight.mul_(3.0)
    w2 = weight.detach().clone()
    ema.update()

    expected_w = 0.9 * (0.9 * w0 + 0.1 * w1) + 0.1 * w2
    torch.testing.assert_close(ema.shadow["lm_head.weight"], expected_w)
    with ema.swap_in():
        torch.testing.assert_close(weight.detach(), expected_w)
        torch.testing.assert_close(table, t1)  # evaluation uses the live table
    torch.testing.assert_close(weight.detach(), w2)

    other = EMA(tiny_model(), rate=0.5)
    other.load_state_dict(ema.state_dict())
    assert other.rate == 0.9
    torch.testing.assert_close(other.shadow["lm_head.weight"], expected_w)


def test_ema_averages_trainable_parameters_only_as_the_reference_does() -> None:
    """The reference's EMA registers ``named_parameters()`` that require gradients: the
    puzzle-embedding table (a buffer trained by sign-SGD) and the constant initial states
    are never averaged, so an EMA costs no copy of a 1.8 GB table."""
    model = tiny_model()
    ema = EMA(model, rate=0.9)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert set(ema.shadow) == trainable
    assert not any(name in ema.shadow for name, _ in model.named_buffers())
    assert "puzzle_emb.weights" in dict(model.named_buffers())
    older = ema.state_dict()  # a checkpoint of an earlier trm also held the table's average
    older["shadow"]["puzzle_emb.weights"] = model.puzzle_emb.weights.clone()
    EMA(tiny_model(), rate=0.5).load_state_dict(older)
