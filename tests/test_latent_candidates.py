"""Winner-take-all latents (train.latent_candidates = K, trm.model.candidates): the winner is
the lowest-loss candidate per puzzle, the gradient is the winner's alone, the carry keeps the
winner's z_H and every candidate's z_L, restarts align the fresh candidates as the paper
does, the estimate counts K, and K = 1 trains bit for bit as before."""

from __future__ import annotations

import pytest
import torch
from attrs import evolve

from tests.tiny_run import build_tiny_data, eval_steps, summary, write_spec
from trm.cli.main import main
from trm.data.shape import DatasetShape
from trm.hardware import HardwareProfile
from trm.model import ACTLoss, TinyRecursiveModel, TRMCarry
from trm.model import candidates as wta
from trm.plugins.planning import memory_estimator
from trm.runtime import RuntimeChoice
from trm.spec import ArchSpec, TrainSpec, load_spec, resolve_spec_path

SEQ_LEN, VOCAB, NUM_IDS, ROWS, K = 6, 5, 3, 4, 3


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
        halt_max_steps=4,
        halt_exploration_prob=0.0,
    )
    fields.update(arch)
    torch.manual_seed(0)
    return TinyRecursiveModel(ArchSpec(**fields), SEQ_LEN, VOCAB, NUM_IDS)  # type: ignore[arg-type]


def make_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, VOCAB, (ROWS, SEQ_LEN), generator=gen)
    labels[:, 0] = -100
    return {
        "inputs": torch.randint(0, VOCAB, (ROWS, SEQ_LEN), generator=gen),
        "labels": labels,
        "puzzle_identifiers": torch.randint(0, NUM_IDS, (ROWS,), generator=gen),
    }


def running_carry(model: TinyRecursiveModel) -> TRMCarry:
    """A carry two steps in: no row halted, K distinct reasoning states a row."""
    batch = make_batch()
    carry = wta.initial_carry(model, batch, K)
    for _ in range(2):
        carry, _ = wta.forward(model, carry, batch, loss_kind="stablemax")
        carry.halted.zero_()
    return carry


def grads(model: TinyRecursiveModel) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def plain_step(model, carry: TRMCarry, z_L: torch.Tensor):
    """The plain step of the same rows from reasoning state ``z_L`` [B, P, D]."""
    plain = TRMCarry(carry.z_H, z_L, carry.steps, carry.halted, carry.current_data)
    return model(plain, carry.current_data)


def test_the_winner_is_the_lowest_loss_candidate_and_its_outputs_are_the_steps():
    model = tiny_model()
    carry = running_carry(model)
    _, outputs = wta.forward(model, carry, carry.current_data, loss_kind="stablemax")
    labels = carry.current_data["labels"]
    losses = []
    for k in range(K):
        _, plain = plain_step(model, carry, carry.z_L[:, k])
        losses.append(wta.candidate_losses(plain["logits"].detach(), labels, "stablemax"))
    losses = torch.stack(losses, dim=1)
    assert torch.equal(outputs["winner"], losses.argmin(dim=1))
    assert len(set(outputs["winner"].tolist())) > 1  # the rows' winners differ: not a constant
    for row, k in enumerate(outputs["winner"].tolist()):
        _, plain = plain_step(model, carry.index_rows(row), carry.z_L[row : row + 1, k])
        torch.testing.assert_close(outputs["logits"][row : row + 1], plain["logits"])


def test_the_gradient_is_the_winners_alone():
    model = tiny_model()
    carry = running_carry(model)
    new, outputs = wta.forward(model, carry, carry.current_data, loss_kind="stablemax")
    loss, _ = ACTLoss.compute(outputs, new.current_data["labels"], new.halted, "stablemax")
    loss.backward()
    got = grads(model)
    winners = outputs["winner"]
    z_L = carry.z_L[torch.arange(ROWS), winners]
    plain_carry, plain = plain_step(model, carry, z_L)
    loss, _ = ACTLoss.compute(plain, plain_carry.current_data["labels"], plain_carry.halted)
    loss.backward()
    want = grads(model)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], msg=name)
    # and it is not the gradient of every candidate together
    all_rows = carry.z_L[:, (winners[0] + 1) % K]
    other_carry, other = plain_step(model, carry, all_rows)
    loss, _ = ACTLoss.compute(other, other_carry.current_data["labels"], other_carry.halted)
    loss.backward()
    other_grads = grads(model)
    assert any(not torch.allclose(got[n], other_grads[n]) for n in want)


def test_the_carry_copies_the_winners_z_H_and_keeps_every_candidates_z_L():
    model = tiny_model()
    carry = running_carry(model)
    new, outputs = wta.forward(model, carry, carry.current_data, loss_kind="stablemax")
    assert new.z_L.shape == carry.z_L.shape
    for row, winner in enumerate(outputs["winner"].tolist()):
        for k in range(K):
            plain_new, _ = plain_step(model, carry.index_rows(row), carry.z_L[row : row + 1, k])
            torch.testing.assert_close(new.z_L[row, k], plain_new.z_L[0])
            if k == winner:
                torch.testing.assert_close(new.z_H[row], plain_new.z_H[0])
    assert not new.z_L.requires_grad and not new.z_H.requires_grad


def test_a_restart_starts_candidate_0_at_L_init_and_aligns_the_others_to_it():
    model = tiny_model()
    carry = running_carry(model)
    carry.halted[:2] = True  # rows 0 and 1 restart, rows 2 and 3 continue
    before = carry.z_L.clone()
    reset = wta.reset_carry(model, carry, make_batch(seed=1))
    assert torch.equal(reset.z_L[2:], before[2:])
    assert torch.equal(reset.z_L[:2, 0], model.L_init.expand(2, *before.shape[2:]))
    directions = wta.top_input_directions(model)
    starts = reset.z_L[:2, :, 0]  # [2, K, D]: one vector a candidate, broadcast over positions
    assert torch.equal(reset.z_L[:2], starts.unsqueeze(2).expand_as(reset.z_L[:2]))

    def share(v: torch.Tensor) -> torch.Tensor:
        return ((v / v.norm(dim=-1, keepdim=True)) @ directions).norm(dim=-1)

    torch.testing.assert_close(share(starts), share(starts[:, :1]).expand(2, K))
    assert not torch.allclose(starts[:, 1], starts[:, 2])  # fresh draws, not copies
    raw = torch.randn(5, K, 16)
    aligned = wta.align_to_first(raw, directions)
    torch.testing.assert_close(aligned.norm(dim=-1), raw.norm(dim=-1))  # lengths kept
    torch.testing.assert_close(share(aligned), share(raw[:, :1]).expand(5, K))


def test_a_carry_of_another_candidate_count_is_fitted():
    model = tiny_model()
    carry = running_carry(model)
    assert wta.fit_carry(carry, K) is carry
    one = wta.fit_carry(carry, 1)
    assert one.z_L.dim() == 3 and torch.equal(one.z_L, carry.z_L[:, 0])
    more = wta.fit_carry(carry, K + 2)
    assert torch.equal(more.z_L[:, :K], carry.z_L)
    assert torch.equal(more.z_L[:, K], carry.z_L[:, 0])
    assert wta.fit_carry(one, 1) is one


def test_the_estimate_counts_K_times_the_activations_and_K_reasoning_states_in_the_carry():
    spec = load_spec(resolve_spec_path("quickstart"))
    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    runtime = RuntimeChoice("cpu", "fp32", 2, False)

    def items(k: int) -> dict[str, int]:
        candidate = evolve(spec, train=evolve(spec.train, latent_candidates=k))
        found = memory_estimator.estimate_items(
            candidate, HardwareProfile(), runtime, shape, process_baseline_bytes=0
        )
        return {item.name: item.bytes for item in found}

    one, four = items(1), items(4)
    assert four["activations"] == 4 * one["activations"]
    sizes = memory_estimator.model_sizes(spec.arch, shape)
    z_bytes = 4 * sizes.positions * sizes.hidden * spec.train.global_batch_size
    assert four["carry (z_H, z_L)"] - one["carry (z_H, z_L)"] == 3 * z_bytes
    assert four["weights"] == one["weights"]


def test_the_tiers_plan_a_smaller_micro_batch_for_K_candidates():
    from trm.memory import MemoryEstimate
    from trm.plugins.planning import tiers

    spec = load_spec(resolve_spec_path("quickstart"))
    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    runtime = RuntimeChoice("cpu", "fp32", 2, False)
    budget: list[int] = []

    def make(candidate) -> MemoryEstimate:
        items = memory_estimator.estimate_items(
            candidate, HardwareProfile(), runtime, shape, process_baseline_bytes=0
        )
        return MemoryEstimate(items=tuple(items), host_budget_bytes=budget[0], remake=make)

    budget.append(10**15)
    whole = make(spec).total_bytes("host")  # K = 1, the whole batch in one micro-batch
    budget[0] = int(whole / 0.7) + 1
    micro_one, _ = tiers.largest_fitting_micro_batch(spec, make(spec), 0.7)
    four = evolve(spec, train=evolve(spec.train, latent_candidates=4))
    micro_four, _ = tiers.largest_fitting_micro_batch(four, make(four), 0.7)
    assert micro_one == spec.train.global_batch_size
    assert micro_four is not None and micro_four < micro_one


def test_latent_candidates_is_one_by_default_and_bounded():
    assert TrainSpec().latent_candidates == 1
    from trm.errors import TrmError
    from trm.spec.checks import validate
    from trm.spec.schema import RunSpec

    with pytest.raises(TrmError, match=r"train\.latent_candidates"):
        validate(RunSpec(train=TrainSpec(latent_candidates=0)), "spec")


@pytest.mark.slow
def test_K_1_trains_bit_identical_to_no_K_and_K_3_trains_and_evaluates(tmp_path):
    data = build_tiny_data(tmp_path / "data")
    runs = {
        "unset": write_spec(tmp_path / "unset", data),
        "one": write_spec(tmp_path / "one", data, latent_candidates=1),
        "three": write_spec(tmp_path / "three", data, latent_candidates=3),
    }
    for name, spec in runs.items():
        assert main(["run", str(spec), "--out", str(tmp_path / f"run-{name}")]) == 0
    unset, one, three = (summary(tmp_path / f"run-{n}") for n in ("unset", "one", "three"))
    assert one["final_weights_sha256"] == unset["final_weights_sha256"]
    assert three["final_weights_sha256"] != unset["final_weights_sha256"]
    assert three["steps"] == unset["steps"]
    assert eval_steps(tmp_path / "run-three") == eval_steps(tmp_path / "run-unset")
