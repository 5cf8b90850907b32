"""The SwiGLU activation's own backward equals autograd's bit for bit (it only skips the
concatenation autograd does for ``chunk``), in both layouts and in fp32 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trm.model.layers import SwiGLU, gated_silu


def _reference(h: torch.Tensor, dim: int) -> torch.Tensor:
    gate, up = h.chunk(2, dim=dim)
    return F.silu(gate) * up


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("dim", "shape"), [(0, (512, 96)), (-1, (3, 17, 512))])
def test_gated_silu_matches_autograd_bit_for_bit(dtype, dim, shape):
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(shape, generator=generator).to(dtype)
    out_shape = list(shape)
    out_shape[dim] //= 2
    grad = torch.randn(out_shape, generator=generator).to(dtype)
    a, b = h.clone().requires_grad_(True), h.clone().requires_grad_(True)
    expected, got = _reference(a, dim), gated_silu(b, dim)
    expected.backward(grad)
    got.backward(grad)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    assert torch.equal(b.grad, a.grad)


def test_swiglu_weights_get_the_same_gradients_as_the_chunked_formulation():
    torch.manual_seed(0)
    layer = SwiGLU(17, 4.0)
    x = torch.randn(17, 64)
    out = layer.forward_leading(x)
    out.square().sum().backward()
    ours = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    gate, up = torch.mm(layer.gate_up.weight, x).chunk(2, dim=0)
    reference = torch.mm(layer.down.weight, F.silu(gate) * up)
    reference.square().sum().backward()
    assert torch.equal(out, reference)
    assert all(torch.equal(a, p.grad) for a, p in zip(ours, layer.parameters(), strict=True))


def test_without_grad_it_is_the_plain_formula():
    h = torch.randn(8, 6)
    with torch.no_grad():
        assert torch.equal(gated_silu(h, 0), _reference(h, 0))
