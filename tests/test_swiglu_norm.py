"""The modified SwiGLU of Speed is Confidence (arch.swiglu_norm): its definition, pinned
against a hand-written formula, its two layouts, its default off, and its refusal by the
reference export."""

from __future__ import annotations

import pytest
import torch

from trm.errors import TrmError
from trm.model import TinyRecursiveModel
from trm.model.layers import SwiGLU
from trm.spec import ArchSpec, RunSpec

EPS = 1e-5


def hand_written(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """sigmoid(g) * RMSNorm(g * v) with [g, v] = x W (split in half), then the down map;
    written out element by element in float64, independent of trm.model.layers."""
    x, w_gate_up, w_down = x.double(), w_gate_up.double(), w_down.double()
    h = x @ w_gate_up.T
    inner = h.shape[-1] // 2
    g, v = h[..., :inner], h[..., inner:]
    product = g * v
    rms = torch.sqrt((product**2).sum(-1, keepdim=True) / inner + EPS)
    gated = (1.0 / (1.0 + torch.exp(-g))) * (product / rms)
    return gated @ w_down.T


def fixed_layer(norm_eps: float | None) -> SwiGLU:
    torch.manual_seed(3)
    layer = SwiGLU(8, 2.0, norm_eps)
    with torch.no_grad():  # fixed, non-random weights: a pinned definition, not a seed's
        n_out, n_in = layer.gate_up.weight.shape
        layer.gate_up.weight.copy_(
            torch.linspace(-1.5, 2.0, n_out * n_in).reshape(n_out, n_in).sin()
        )
        n_out, n_in = layer.down.weight.shape
        layer.down.weight.copy_(torch.linspace(-1.0, 1.0, n_out * n_in).reshape(n_out, n_in))
    return layer


def fixed_input() -> torch.Tensor:
    return torch.linspace(-3.0, 3.0, 3 * 5 * 8).reshape(3, 5, 8).cos() * 2.0


def test_the_normed_gate_is_sigmoid_of_gate_times_the_rms_norm_of_gate_times_up() -> None:
    layer = fixed_layer(EPS)
    x = fixed_input()
    expected = hand_written(x, layer.gate_up.weight, layer.down.weight)
    torch.testing.assert_close(layer(x).double(), expected, rtol=1e-5, atol=1e-5)


def test_the_plain_swiglu_is_not_that_formula() -> None:
    """The hand-written formula tells the two gates apart (the test above can fail)."""
    layer = fixed_layer(None)
    x = fixed_input()
    expected = hand_written(x, layer.gate_up.weight, layer.down.weight)
    assert not torch.allclose(layer(x).double(), expected, rtol=1e-3, atol=1e-3)


def test_the_position_major_layout_computes_the_same_map() -> None:
    layer = fixed_layer(EPS)
    x = fixed_input()[0]  # [5, 8]
    torch.testing.assert_close(layer.forward_leading(x.T.contiguous()).T, layer(x))


def test_it_is_off_by_default_and_keeps_the_parameters() -> None:
    assert ArchSpec().swiglu_norm is False
    arch = dict(hidden_size=16, expansion=2.0, num_heads=2, L_layers=1, puzzle_emb_ndim=0)
    plain = TinyRecursiveModel(ArchSpec(**arch), 6, 5, 1)
    normed = TinyRecursiveModel(ArchSpec(**arch, swiglu_norm=True), 6, 5, 1)
    assert plain.net.layers[0].mlp.norm_eps is None
    assert normed.net.layers[0].mlp.norm_eps == ArchSpec().rms_norm_eps
    assert {k: v.shape for k, v in plain.state_dict().items()} == {
        k: v.shape for k, v in normed.state_dict().items()
    }


@pytest.mark.parametrize("mlp_t", [False, True])
def test_a_model_with_it_trains(mlp_t: bool) -> None:
    torch.manual_seed(0)
    arch = ArchSpec(
        hidden_size=16,
        expansion=2.0,
        num_heads=2,
        L_layers=1,
        H_cycles=2,
        L_cycles=2,
        mlp_t=mlp_t,
        pos_encodings="none" if mlp_t else "rope",
        puzzle_emb_ndim=0,
        puzzle_emb_len=1,
        swiglu_norm=True,
    )
    model = TinyRecursiveModel(arch, 6, 5, 1)
    batch = {
        "inputs": torch.randint(0, 5, (4, 6)),
        "labels": torch.randint(0, 5, (4, 6)),
        "puzzle_identifiers": torch.zeros(4, dtype=torch.long),
    }
    _, outputs = model(model.initial_carry(batch), batch)
    outputs["logits"].float().square().mean().backward()
    grads = [p.grad for p in model.net.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_the_reference_export_refuses_it_in_one_line() -> None:
    from trm.plugins.formats.reference_config import reference_config

    spec = RunSpec(arch=ArchSpec(swiglu_norm=True))
    with pytest.raises(TrmError, match=r"arch\.swiglu_norm = true: the reference") as raised:
        reference_config(spec, "data", 10, "step_1")
    assert "\n" not in str(raised.value)
