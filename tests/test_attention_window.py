"""The local 2-D attention window (arch.attention_window): its mask, its density, its two
kernels, and that it reaches the FLOP count, the memory estimate and the spec checks."""

from __future__ import annotations

import pytest
import torch
from attrs import evolve

from trm.errors import TrmError
from trm.measure.flops import attention_density, model_flops, net_call_flops
from trm.model import TinyRecursiveModel
from trm.model.layers import Attention
from trm.model.window import (
    flex_attention_available,
    window_block_mask,
    window_bool_mask,
    window_density,
    window_pairs,
)
from trm.spec import ArchSpec, RunSpec
from trm.spec.checks import validate

SIDE, PREFIX, VOCAB, NUM_IDS = 4, 2, 5, 3


def attention_arch(**overrides: object) -> ArchSpec:
    fields: dict[str, object] = dict(
        hidden_size=16,
        expansion=2.0,
        num_heads=2,
        L_layers=2,
        H_cycles=2,
        L_cycles=2,
        pos_encodings="rope",
        mlp_t=False,
        puzzle_emb_ndim=16,
        puzzle_emb_len=PREFIX,
        halt_max_steps=2,
        halt_exploration_prob=0.0,
    )
    fields.update(overrides)
    return ArchSpec(**fields)  # type: ignore[arg-type]


def grid_batch(size: int, seq_len: int = SIDE * SIDE) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "inputs": torch.randint(0, VOCAB, (size, seq_len), generator=gen),
        "labels": torch.randint(0, VOCAB, (size, seq_len), generator=gen),
        "puzzle_identifiers": torch.randint(0, NUM_IDS, (size,), generator=gen),
    }


def logits_of(model: TinyRecursiveModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    carry = model.initial_carry(batch)
    _, outputs = model(carry, batch)
    return outputs["logits"]


# ------------------------------------------------------------------ the mask and its density


@pytest.mark.parametrize("prefix", [0, 1, 16])
@pytest.mark.parametrize("side", [1, 2, 5, 6, 9])
def test_density_formula_counts_the_pairs_of_a_brute_force_mask(prefix: int, side: int) -> None:
    positions = prefix + side * side
    for window in range(0, side + 2):
        brute = 0
        for q in range(positions):
            for k in range(positions):
                if window == 0 or q < prefix or k < prefix:
                    brute += 1
                    continue
                qr, qc = divmod(q - prefix, side)
                kr, kc = divmod(k - prefix, side)
                brute += abs(qr - kr) <= window and abs(qc - kc) <= window
        assert window_pairs(prefix, side, window) == brute, (prefix, side, window)
        assert window_density(prefix, side, window) == brute / positions**2
        if window:
            assert int(window_bool_mask(prefix, side, window).sum()) == brute


def test_a_cell_never_sees_cells_outside_its_window_but_always_sees_the_prefix() -> None:
    torch.manual_seed(0)
    attention = Attention(hidden=16, num_heads=2)
    mask = window_bool_mask(PREFIX, SIDE, 1)
    x = torch.randn(1, PREFIX + SIDE * SIDE, 16)
    cell = PREFIX + 0  # row 0, column 0: its window is rows 0-1, columns 0-1
    far = PREFIX + 3 * SIDE + 3  # row 3, column 3
    moved_far, moved_prefix = x.clone(), x.clone()
    moved_far[0, far] += 5.0
    moved_prefix[0, 0] += 5.0
    with torch.no_grad():
        before = attention(x, mask=mask)[0, cell]
        assert torch.equal(attention(moved_far, mask=mask)[0, cell], before)
        assert not torch.allclose(attention(moved_prefix, mask=mask)[0, cell], before)
        # the prefix token attends to everything, the far cell included
        assert not torch.allclose(
            attention(moved_far, mask=mask)[0, 0], attention(x, mask=mask)[0, 0]
        )


# ------------------------------------------------------------------ kernels agree


@pytest.mark.skipif(not flex_attention_available(), reason="this torch has no FlexAttention")
def test_flex_attention_and_the_masked_sdpa_fallback_give_the_same_outputs() -> None:
    torch.manual_seed(0)
    attention = Attention(hidden=32, num_heads=2)
    side, prefix, window = 6, 3, 1
    x = torch.randn(2, prefix + side * side, 32)
    bool_mask = window_bool_mask(prefix, side, window)
    block_mask = window_block_mask(prefix, side, window, "cpu")
    compiled = torch.compile(attention)
    with torch.no_grad():  # torch has no FlexAttention backward on the CPU
        fallback = attention(x, mask=bool_mask)
        flex = compiled(x, mask=block_mask)
        dense = attention(x)
    torch.testing.assert_close(flex, fallback, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(fallback, dense, atol=1e-3)  # the window does mask something


@pytest.mark.parametrize("window", [SIDE - 1, SIDE, 3 * SIDE])
def test_a_window_covering_the_whole_grid_equals_dense_attention(window: int) -> None:
    torch.manual_seed(0)
    dense = TinyRecursiveModel(attention_arch(), SIDE * SIDE, VOCAB, NUM_IDS)
    windowed = TinyRecursiveModel(
        attention_arch(attention_window=window), SIDE * SIDE, VOCAB, NUM_IDS
    )
    windowed.load_state_dict(dense.state_dict())
    batch = grid_batch(3)
    torch.testing.assert_close(logits_of(windowed, batch), logits_of(dense, batch))


def test_a_narrow_window_changes_the_model_and_still_trains() -> None:
    torch.manual_seed(0)
    dense = TinyRecursiveModel(attention_arch(), SIDE * SIDE, VOCAB, NUM_IDS)
    windowed = TinyRecursiveModel(attention_arch(attention_window=1), SIDE * SIDE, VOCAB, NUM_IDS)
    windowed.load_state_dict(dense.state_dict())
    batch = grid_batch(3)
    logits = logits_of(windowed, batch)
    assert not torch.allclose(logits, logits_of(dense, batch), atol=1e-4)
    logits.float().square().mean().backward()
    grads = [p.grad for p in windowed.net.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_dense_attention_takes_no_mask() -> None:
    model = TinyRecursiveModel(attention_arch(), SIDE * SIDE, VOCAB, NUM_IDS)
    assert model.window_masks is None
    assert model.attention_mask(torch.device("cpu")) is None


def _mask_by_hand(prefix: int, side: int, window: int) -> list[list[float]]:
    """The additive window mask written out from the rule, one pair at a time."""
    rows = []
    for q in range(prefix + side * side):
        row = []
        for k in range(prefix + side * side):
            if q < prefix or k < prefix:
                allowed = True  # the prefix sees and is seen by everything
            else:
                (qr, qc), (kr, kc) = divmod(q - prefix, side), divmod(k - prefix, side)
                allowed = abs(qr - kr) <= window and abs(qc - kc) <= window
            row.append(0.0 if allowed else float("-inf"))
        rows.append(row)
    return rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_additive_mask_a_training_step_takes_holds_the_windows_values(dtype) -> None:
    """Window 1 over a 4x4 grid after a 2-token prefix: the mask an eager step's attention
    calls take (fp32, or bf16 under autocast) is 0 on the pairs of the window and -inf on the
    rest, entry by entry."""
    model = TinyRecursiveModel(attention_arch(attention_window=1), SIDE * SIDE, VOCAB, NUM_IDS)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        mask = model.attention_mask(torch.device("cpu"))
    assert isinstance(mask, torch.Tensor) and mask.dtype == dtype
    assert mask.float().tolist() == _mask_by_hand(PREFIX, SIDE, 1)
    cell = PREFIX + 1 * SIDE + 1  # row 1, column 1: a full 3x3 window, every prefix token
    assert (mask[cell] == 0).sum() == PREFIX + 9
    corner = PREFIX  # row 0, column 0: its 2x2 corner of the grid
    assert mask[corner, PREFIX + 2].item() == float("-inf")  # row 0, column 2
    assert mask[corner, PREFIX + SIDE + 1].item() == 0.0  # row 1, column 1


def test_the_mask_is_built_once_per_device() -> None:
    model = TinyRecursiveModel(attention_arch(attention_window=1), SIDE * SIDE, VOCAB, NUM_IDS)
    first = model.attention_mask(torch.device("cpu"))
    logits_of(model, grid_batch(2))
    assert model.attention_mask(torch.device("cpu")) is first


# ------------------------------------------------------------------ refusals


def test_a_window_on_the_mlp_variant_is_refused_naming_the_key() -> None:
    spec = RunSpec(arch=attention_arch(mlp_t=True, attention_window=2))
    with pytest.raises(TrmError, match=r"arch\.attention_window") as raised:
        validate(spec, "spec")
    assert "mlp_t" in str(raised.value) and "\n" not in str(raised.value)


def test_a_window_over_a_sequence_that_is_no_square_grid_is_refused() -> None:
    with pytest.raises(TrmError, match=r"arch\.attention_window = 1 needs a square grid.*10 cells"):
        TinyRecursiveModel(attention_arch(attention_window=1), 10, VOCAB, NUM_IDS)


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(TrmError, match=r"arch\.attention_window"):
        validate(RunSpec(arch=attention_arch(attention_window=-1)), "spec")


# ------------------------------------------------------------------ FLOPs and memory


def test_flops_count_only_the_windows_query_key_pairs() -> None:
    dense, windowed = attention_arch(), attention_arch(attention_window=1)
    seq = SIDE * SIDE
    positions = PREFIX + seq
    pairs = window_pairs(PREFIX, SIDE, 1)
    saved = dense.L_layers * 2 * 2 * (positions**2 - pairs) * dense.hidden_size
    assert net_call_flops(dense, seq) - net_call_flops(windowed, seq) == saved
    assert model_flops(windowed, seq, VOCAB).attention_density == pairs / positions**2
    assert attention_density(dense, seq) == 1.0
    assert attention_density(evolve(windowed, attention_window=SIDE), seq) == 1.0


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_window_at_seq_len_900_keeps_what_the_estimate_counts_and_no_score_matrix(precision):
    """The masked kernel keeps q, k, v, its output and the log-sum-exp, as dense does: the
    estimate's activations are dense's, and it adds the boolean mask once."""
    from tests.test_estimator import MAZE, saved_bytes_per_sample
    from trm.hardware import HardwareProfile
    from trm.plugins.planning import memory_estimator
    from trm.runtime import RuntimeChoice

    arch = ArchSpec(
        hidden_size=64,
        num_heads=4,
        H_cycles=1,
        L_cycles=1,
        puzzle_emb_ndim=0,
        puzzle_emb_len=1,
        attention_window=2,
    )
    sizes = memory_estimator.model_sizes(arch, MAZE)
    predicted = memory_estimator.step_activation_bytes(arch, sizes, precision)
    measured = saved_bytes_per_sample(arch, precision, shape=MAZE)
    assert predicted == pytest.approx(measured, rel=0.03)
    items = memory_estimator.estimate_items(
        RunSpec(arch=arch, train=attrs_train()),
        HardwareProfile(),
        RuntimeChoice("cpu", precision, 1, False),
        MAZE,
        process_baseline_bytes=0,
    )
    mask = {item.name: item.bytes for item in items}["attention window mask"]
    low = 2 if precision == "bf16" else 4
    assert mask == sizes.positions**2 * (1 + low)


def test_every_grad_carrying_call_shares_one_saved_mask() -> None:
    """The mask the masked kernel saves for backward is the one built once, not a copy per
    call (a boolean mask would be converted, and kept, once per attention call)."""
    arch = attention_arch(attention_window=1, L_cycles=3)
    model = TinyRecursiveModel(arch, SIDE * SIDE, VOCAB, NUM_IDS).train()
    batch = grid_batch(2)
    positions = PREFIX + SIDE * SIDE
    square: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() >= 2 and t.shape[-2:] == (positions, positions):
            square.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(model.initial_carry(batch), batch)
    assert len(square) == 1


def attrs_train():
    from trm.spec import TrainSpec

    return TrainSpec(global_batch_size=4, max_steps=1)


def test_a_windowed_network_is_not_exported_in_the_reference_format() -> None:
    from trm.plugins.formats.reference_config import reference_config

    spec = RunSpec(arch=attention_arch(attention_window=1))
    with pytest.raises(TrmError, match=r"reference implementation has dense attention only"):
        reference_config(spec, "data", 10, "step_1")
