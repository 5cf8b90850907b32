"""Exploration's noise in the model and its batching: off, the recursion is bit-identical and
draws nothing; on, noise reaches z_L once per H cycle, only in the rows given a scale; N
trajectories of a batch cost one forward per supervision step; the same seed gives the same
trajectories."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_model import make_batch
from tests.test_model import tiny_model as plain_tiny_model
from trm.data.selection import Candidates
from trm.device.contract import HOST, Placement
from trm.evaluation.explore import Exploration, Explorer, curve_sizes
from trm.evaluation.steps import run_all_steps
from trm.model.latent_noise import LatentNoise
from trm.plugins.selection import FirstAccepted, HaltFirst, HighestQ, Majority

PLACEMENT = Placement(HOST, torch.device("cpu"))


class CountingNoise(LatentNoise):
    """LatentNoise that counts its draws (one addend an H cycle)."""

    calls: int = 0

    def addend(self, z_L, position_major):
        type(self).calls += 1
        return super().addend(z_L, position_major)


def tiny_model(**overrides):
    """The tests' tiny model with a Q head that is not constant (it starts at bias -5 and
    zero weights, which would make every trajectory's halting logit the same)."""
    model = plain_tiny_model(**overrides)
    with torch.no_grad():
        model.q_head.weight.normal_(0.0, 0.5)
    return model


def outputs_of(model, batch):
    model.eval()
    outputs, steps = run_all_steps(model, batch, model.arch.halt_max_steps, PLACEMENT)
    return outputs, steps


@pytest.mark.parametrize("mlp_t", [False, True])
def test_without_noise_the_recursion_is_bit_identical_and_draws_nothing(mlp_t: bool) -> None:
    torch.manual_seed(0)
    model = tiny_model(mlp_t=mlp_t, pos_encodings="learned" if mlp_t else "rope")
    batch = make_batch(3)
    plain, _ = outputs_of(model, batch)
    state = torch.get_rng_state()
    again, _ = outputs_of(model, batch)
    assert torch.equal(torch.get_rng_state(), state)  # nothing drawn from the global RNG
    for key in plain:
        assert torch.equal(plain[key], again[key])
    zero = LatentNoise(torch.zeros(3), torch.Generator().manual_seed(1))
    with model.latent_noise_on(zero):
        zeroed, _ = outputs_of(model, batch)
    for key in plain:  # a scale of 0 adds exactly nothing
        assert torch.equal(plain[key], zeroed[key])
    assert model.latent_noise is None  # off again after the block


@pytest.mark.parametrize("mlp_t", [False, True])
def test_noise_reaches_z_L_once_per_H_cycle_and_only_in_rows_given_a_scale(mlp_t: bool) -> None:
    torch.manual_seed(0)
    model = tiny_model(mlp_t=mlp_t, pos_encodings="learned" if mlp_t else "rope")
    batch = make_batch(4)
    plain, _ = outputs_of(model, batch)
    scale = torch.tensor([0.0, 0.5, 0.0, 0.5])
    CountingNoise.calls = 0
    with model.latent_noise_on(CountingNoise(scale, torch.Generator().manual_seed(3))):
        noisy, _ = outputs_of(model, batch)
    steps, H_cycles = model.arch.halt_max_steps, model.arch.H_cycles
    assert CountingNoise.calls == steps * H_cycles
    for row in (0, 2):
        assert torch.equal(noisy["logits"][row], plain["logits"][row])
    for row in (1, 3):
        assert not torch.equal(noisy["logits"][row], plain["logits"][row])


def test_n_trajectories_cost_one_forward_per_supervision_step() -> None:
    torch.manual_seed(0)
    model = tiny_model()
    model.eval()
    shapes: list[int] = []
    forward = model.forward

    def counted(carry, batch, *args):
        shapes.append(int(batch["inputs"].shape[0]))
        return forward(carry, batch, *args)

    model.forward = counted  # type: ignore[method-assign]
    exploration = Exploration(trajectories=8, noise=0.3, rule=HighestQ())
    explored = Explorer(exploration, PLACEMENT).run(model, make_batch(3), 4)
    assert shapes == [3 * 8] * model.arch.halt_max_steps
    assert explored.answers.shape == (3, 8, 6)
    assert explored.q_halt.shape == explored.halt_steps.shape == (3, 8)


def test_trajectory_zero_is_the_plain_run_and_one_trajectory_is_exactly_today() -> None:
    torch.manual_seed(0)
    model = tiny_model()
    batch = make_batch(3)
    plain, _ = outputs_of(model, batch)
    one = Explorer(Exploration(), PLACEMENT).run(model, batch, 4)
    assert np.array_equal(one.selected, plain["logits"].argmax(-1).numpy())
    assert np.array_equal(one.selected_q_halt, plain["q_halt_logits"].numpy())
    many = Explorer(Exploration(4, 0.3, HighestQ()), PLACEMENT).run(model, batch, 4)
    assert np.array_equal(many.answers[:, 0], plain["logits"].argmax(-1).numpy())
    assert np.allclose(many.q_halt[:, 0], plain["q_halt_logits"].numpy(), atol=1e-6)


def test_the_same_seed_gives_the_same_trajectories_and_another_seed_others() -> None:
    torch.manual_seed(0)
    model = tiny_model()
    batch = make_batch(2)

    def q_of(seed: int) -> np.ndarray:
        exploration = Exploration(6, 0.5, HighestQ(), seed=seed)
        return Explorer(exploration, PLACEMENT).run(model, batch, 4).q_halt

    assert np.array_equal(q_of(0), q_of(0))
    assert not np.array_equal(q_of(0), q_of(1))


# ------------------------------------------------------------------ selection rules


def candidates(q, steps, answers=None, check=None) -> Candidates:
    count = len(q)
    if answers is None:
        answers = [[i] * 3 for i in range(count)]
    return Candidates(
        question=np.zeros(3, dtype=np.int64),
        answers=np.asarray(answers),
        halt_steps=np.asarray(steps),
        q_halt=np.asarray(q, dtype=np.float32),
        max_steps=16,
        check=check,
    )


def test_q_picks_the_highest_halting_logit_and_the_first_of_a_tie() -> None:
    assert HighestQ().pick(candidates([0.1, 2.0, -1.0], [3, 3, 3])) == 1
    assert HighestQ().pick(candidates([1.0, 1.0], [3, 3])) == 0


def test_halt_first_picks_the_earliest_halt_and_breaks_ties_by_q() -> None:
    rule = HaltFirst()
    assert rule.pick(candidates([5.0, 0.1, 0.2], [9, 2, 4])) == 1  # earliest, though lower Q
    assert rule.pick(candidates([5.0, 0.1, 0.7], [9, 2, 2])) == 2  # tie at step 2: higher Q
    assert rule.pick(candidates([0.3, 0.1], [16, 16])) == 0  # none halted: the highest Q


def test_rules_picks_the_first_accepted_answer_else_the_highest_q() -> None:
    rule = FirstAccepted()
    accepts_two = lambda question, answer: int(answer[0]) == 2  # noqa: E731
    assert rule.pick(candidates([9.0, 0.0, 0.0, 0.0], [1] * 4, check=accepts_two)) == 2
    never = lambda question, answer: False  # noqa: E731
    assert rule.pick(candidates([0.0, 3.0, 1.0], [1] * 3, check=never)) == 1
    assert rule.needs_rules


def test_vote_picks_the_most_frequent_answer_and_breaks_ties_by_q() -> None:
    rule = Majority()
    answers = [[1, 1, 1], [2, 2, 2], [2, 2, 2], [3, 3, 3]]
    assert rule.pick(candidates([9.0, 0.0, 0.1, 8.0], [1] * 4, answers)) in (1, 2)
    assert rule.pick(candidates([9.0, 0.0, 0.1, 8.0], [1] * 4, answers)) == 2  # higher Q of two
    tie = [[1, 1, 1], [1, 1, 1], [2, 2, 2], [2, 2, 2]]
    assert rule.pick(candidates([0.0, 0.5, 3.0, 0.0], [1] * 4, tie)) == 2  # tie: highest Q


def test_curve_sizes_are_powers_of_two_then_n() -> None:
    assert curve_sizes(1) == [1]
    assert curve_sizes(8) == [1, 2, 4, 8]
    assert curve_sizes(6) == [1, 2, 4, 6]
