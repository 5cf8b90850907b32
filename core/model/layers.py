"""Building blocks of the TRM network: linear, embedding, RMS norm, SwiGLU, RoPE, attention.

All layers keep their weights in float32 and never cast them; under ``torch.autocast`` the
matrix products run in the autocast dtype while norms and residual sums stay in float32.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .window import flex_attention, is_block_mask

CosSin = tuple[Tensor, Tensor]

_TRUNC_BOUND = 2.0  # truncate at ±2 standard deviations of the underlying normal


def _truncated_unit_std(bound: float = _TRUNC_BOUND) -> float:
    """Standard deviation of a standard normal truncated to [-bound, bound]."""
    mass = math.erf(bound / math.sqrt(2.0))
    density = math.exp(-0.5 * bound * bound) / math.sqrt(2.0 * math.pi)
    return math.sqrt(1.0 - 2.0 * bound * density / mass)


def trunc_normal_(tensor: Tensor, std: float) -> Tensor:
    """Fill ``tensor`` in place with a normal truncated at ±2σ whose *actual* std is ``std``.

    Like JAX/Flax's truncated-normal initialiser (and unlike ``nn.init.trunc_normal_``, whose
    ``std`` is that of the normal before truncation). ``std == 0`` gives zeros.
    """
    with torch.no_grad():
        if std == 0:
            return tensor.zero_()
        sigma = std / _truncated_unit_std()
        return nn.init.trunc_normal_(
            tensor, mean=0.0, std=sigma, a=-_TRUNC_BOUND * sigma, b=_TRUNC_BOUND * sigma
        )


def round_up_to_multiple(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``value``."""
    return -(-value // multiple) * multiple


class Linear(nn.Module):
    """``y = x Wᵀ (+ b)``; W [out, in] is truncated LeCun normal (std 1/sqrt(in)), b zeros."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(
            trunc_normal_(torch.empty(out_features, in_features), std=in_features**-0.5)
        )
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, bias={self.bias is not None}"


class Embedding(nn.Module):
    """Lookup table [num_embeddings, dim] initialised truncated-normal with std ``init_std``."""

    def __init__(self, num_embeddings: int, dim: int, init_std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(trunc_normal_(torch.empty(num_embeddings, dim), std=init_std))

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight)


def rms_norm(x: Tensor, eps: float, dim: int = -1) -> Tensor:
    """Non-parametric RMS norm over axis ``dim``, computed in float32, returned in x's dtype."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.square().mean(dim, keepdim=True) + eps)
    return normed.to(x.dtype)


def swiglu_inner_width(hidden: int, expansion: float) -> int:
    """SwiGLU inner width: ``round(expansion * hidden * 2/3)`` rounded up to a multiple of 256."""
    return round_up_to_multiple(round(expansion * hidden * 2 / 3), 256)


class _GatedSiLU(torch.autograd.Function):
    """``silu(gate) * up`` of the two halves of ``h`` along ``dim``, whose backward writes
    both halves' gradients into one tensor shaped like ``h``.

    The same operations as ``silu(gate) * up`` on ``h.chunk(2, dim)`` in both directions, so
    values and gradients are bit for bit those of autograd's; what it saves is the
    concatenation autograd does for ``chunk``'s backward — a full read and write of the
    fused projection's gradient (32 MiB per call in the quickstart's position mixing).
    """

    @staticmethod
    def forward(ctx, h: Tensor, dim: int) -> Tensor:
        gate, up = h.chunk(2, dim=dim)
        activated = F.silu(gate)
        ctx.dim = dim
        ctx.save_for_backward(gate, up, activated)
        return activated * up

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        gate, up, activated = ctx.saved_tensors
        shape = list(grad.shape)
        shape[ctx.dim] *= 2
        grad_h = grad.new_empty(shape)
        grad_gate, grad_up = grad_h.chunk(2, dim=ctx.dim)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=grad_gate)
        torch.mul(grad, activated, out=grad_up)
        return grad_h, None


def gated_silu(h: Tensor, dim: int) -> Tensor:
    """``silu(gate) * up`` for ``gate, up = h.chunk(2, dim)``.

    Eagerly through :class:`_GatedSiLU` (no concatenation in the backward); under
    torch.compile as plain operations, which Inductor fuses itself.
    """
    if torch.compiler.is_compiling() or not (torch.is_grad_enabled() and h.requires_grad):
        gate, up = h.chunk(2, dim=dim)
        return F.silu(gate) * up
    return _GatedSiLU.apply(h, dim)


def normed_gate(h: Tensor, dim: int, eps: float) -> Tensor:
    """The modified SwiGLU's gate of Speed is Confidence (Dillon 2026, arXiv 2601.19085):
    ``sigmoid(gate) * rms_norm(gate * up)`` for ``gate, up = h.chunk(2, dim)``, the RMS norm
    (no weights, float32) over the inner axis ``dim``.

    ``silu(gate) * up`` is ``sigmoid(gate) * gate * up``; normalising the product ``gate *
    up`` bounds its magnitude, which the paper needs for Muon's orthogonalised updates at a
    high learning rate.
    """
    gate, up = h.chunk(2, dim=dim)
    return torch.sigmoid(gate) * rms_norm(gate * up, eps, dim=dim)


class SwiGLU(nn.Module):
    """``down(silu(gate) * up)`` over the last axis of width ``hidden``.

    The inner width is ``round(expansion * hidden * 2/3)`` rounded up to a multiple of 256;
    gate and up share one fused projection ``gate_up`` [hidden -> 2 * inner]. With
    ``norm_eps`` given, the gate is :func:`normed_gate` instead (``arch.swiglu_norm``; same
    parameters).
    """

    def __init__(self, hidden: int, expansion: float, norm_eps: float | None = None) -> None:
        super().__init__()
        self.inter = swiglu_inner_width(hidden, expansion)
        self.gate_up = Linear(hidden, 2 * self.inter)
        self.down = Linear(self.inter, hidden)
        self.norm_eps = norm_eps

    def _gate(self, h: Tensor, dim: int) -> Tensor:
        if self.norm_eps is None:
            return gated_silu(h, dim=dim)
        return normed_gate(h, dim, self.norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self._gate(self.gate_up(x), dim=-1))

    def forward_leading(self, x: Tensor) -> Tensor:
        """The same map along the *first* axis: x [hidden, N] -> [hidden, N].

        Equals ``forward(x.T).T`` without transposing anything: the weights multiply from the
        left, so each projection is one matrix product over all N columns.
        """
        return torch.mm(self.down.weight, self._gate(torch.mm(self.gate_up.weight, x), dim=0))


class RotaryEmbedding(nn.Module):
    """Rotary position tables for ``max_positions`` positions of a ``dim``-wide head.

    ``forward()`` returns ``(cos, sin)``, each float32 [max_positions, dim], in the
    rotate-half layout (the frequency vector repeated twice along the last axis).
    """

    def __init__(self, dim: int, max_positions: int, base: float) -> None:
        super().__init__()
        inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self) -> CosSin:
        return self.cos, self.sin


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last axis."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """Rotate q, k [B, S, H, Dh] by position tables cos, sin [S, Dh]; computed in cos's dtype."""
    cos_b, sin_b = cos.unsqueeze(-2), sin.unsqueeze(-2)

    def rotate(t: Tensor) -> Tensor:
        t_c = t.to(cos.dtype)
        return (t_c * cos_b + rotate_half(t_c) * sin_b).to(t.dtype)

    return rotate(q), rotate(k)


class Attention(nn.Module):
    """Non-causal multi-head self-attention with a fused qkv projection and optional RoPE."""

    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"hidden={hidden} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads
        self.qkv = Linear(hidden, 3 * hidden)
        self.o = Linear(hidden, hidden)

    def forward(self, x: Tensor, cos_sin: CosSin | None = None, mask=None) -> Tensor:
        """x [B, S, hidden] -> [B, S, hidden]; cos_sin tables must cover S positions.

        ``mask`` None is dense attention; a [S, S] tensor (boolean, True: allowed, or
        additive, in q's dtype) goes to ``scaled_dot_product_attention``; a FlexAttention
        ``BlockMask`` to ``flex_attention`` (see :mod:`trm.model.window`).
        """
        batch, seq, hidden = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.unbind(dim=2)
        if cos_sin is not None:
            cos, sin = cos_sin
            q, k = apply_rotary(q, k, cos[:seq], sin[:seq])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        elif is_block_mask(mask):
            out = flex_attention(q, k, v, block_mask=mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(out.transpose(1, 2).reshape(batch, seq, hidden))
