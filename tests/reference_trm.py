"""The reference implementation's TRM, written for the tests from its description alone.

This is an independent plain-PyTorch reading of SamsungSAILMontreal/TinyRecursiveModels'
``models/recursive_reasoning/trm.py`` as its paper and code describe it — not trm's model, and
importing nothing of trm — so that the interop tests compare two separate implementations:
the loss head holds the ACT model as ``model``, which holds the network as ``inner``; the
network's tensors carry the reference's names (``embed_tokens.embedding_weight``,
``L_level.layers.i.mlp.gate_up_proj.weight``, ``puzzle_emb.weights``, ``H_init`` ...), so its
``state_dict()`` is a reference checkpoint. Evaluation runs ``halt_max_steps`` supervision
steps from ``H_init``/``L_init``, each ``H_cycles`` x (``L_cycles`` updates of z_L, one of
z_H) with the one shared ``L_level``; the answer is the last step's logits.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ARCH_NAME = "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1"


def _norm(x: Tensor, eps: float) -> Tensor:
    x32 = x.float()
    return (x32 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class _Table(nn.Module):
    """An embedding held as ``embedding_weight`` (the reference's CastedEmbedding)."""

    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.embedding_weight = nn.Parameter(torch.zeros(rows, width))


class _Puzzles(nn.Module):
    """The puzzle table, a buffer named ``weights`` (the reference's sparse embedding)."""

    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.register_buffer("weights", torch.zeros(rows, width))


class _GatedMLP(nn.Module):
    def __init__(self, width: int, expansion: float) -> None:
        super().__init__()
        inner = 256 * math.ceil(round(expansion * width * 2 / 3) / 256)
        self.gate_up_proj = nn.Linear(width, 2 * inner, bias=False)
        self.down_proj = nn.Linear(inner, width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class _SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_width = heads, width // heads
        self.qkv_proj = nn.Linear(width, 3 * width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: Tensor, rotary: tuple[Tensor, Tensor] | None) -> Tensor:
        b, s, _ = x.shape
        qkv = self.qkv_proj(x).view(b, s, 3 * self.heads, self.head_width)
        q, k, v = qkv.split(self.heads, dim=2)
        if rotary is not None:
            cos, sin = (t[:s].unsqueeze(-2) for t in rotary)

            def turn(t: Tensor) -> Tensor:
                half = t.shape[-1] // 2
                return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin

            q, k = turn(q), turn(k)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class _Layer(nn.Module):
    def __init__(self, cfg: dict[str, Any], positions: int) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg["mlp_t"]:
            self.mlp_t = _GatedMLP(positions, cfg["expansion"])
        else:
            self.self_attn = _SelfAttention(cfg["hidden_size"], cfg["num_heads"])
        self.mlp = _GatedMLP(cfg["hidden_size"], cfg["expansion"])

    def forward(self, x: Tensor, rotary: tuple[Tensor, Tensor] | None) -> Tensor:
        eps = 1e-5
        if self.cfg["mlp_t"]:
            t = x.transpose(1, 2)
            x = _norm(t + self.mlp_t(t), eps).transpose(1, 2)
        else:
            x = _norm(x + self.self_attn(x, rotary), eps)
        return _norm(x + self.mlp(x), eps)


class _Stack(nn.Module):
    def __init__(self, cfg: dict[str, Any], positions: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(cfg, positions) for _ in range(cfg["L_layers"]))

    def forward(self, h: Tensor, injection: Tensor, rotary) -> Tensor:
        h = h + injection
        for layer in self.layers:
            h = layer(h, rotary)
        return h


class ReferenceInner(nn.Module):
    def __init__(self, cfg: dict[str, Any], seq_len: int, vocab: int, identifiers: int) -> None:
        super().__init__()
        self.cfg = cfg
        width = cfg["hidden_size"]
        ndim = cfg.get("puzzle_emb_ndim", 0)
        plen = cfg.get("puzzle_emb_len", 16) or -(-ndim // width)
        self.prefix = plen
        self.embed_tokens = _Table(vocab, width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.q_head = nn.Linear(width, 2, bias=True)
        if ndim > 0:
            self.puzzle_emb = _Puzzles(identifiers, ndim)
        if cfg["pos_encodings"] == "learned":
            self.embed_pos = _Table(seq_len + plen, width)
        self.L_level = _Stack(cfg, seq_len + plen)
        dtype = getattr(torch, cfg.get("forward_dtype", "bfloat16"))
        self.register_buffer("H_init", torch.zeros(width, dtype=dtype))
        self.register_buffer("L_init", torch.zeros(width, dtype=dtype))
        self.positions = seq_len + plen

    def rotary(self) -> tuple[Tensor, Tensor] | None:
        if self.cfg["pos_encodings"] != "rope":
            return None
        dim = self.cfg["hidden_size"] // self.cfg["num_heads"]
        freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(self.positions).float(), freq).repeat(1, 2)
        return angles.cos(), angles.sin()

    def embed(self, inputs: Tensor, identifiers: Tensor) -> Tensor:
        width = self.cfg["hidden_size"]
        x = self.embed_tokens.embedding_weight[inputs]
        if hasattr(self, "puzzle_emb"):
            p = self.puzzle_emb.weights[identifiers]
            p = F.pad(p, (0, self.prefix * width - p.shape[-1]))
            x = torch.cat((p.view(-1, self.prefix, width), x), dim=1)
        if hasattr(self, "embed_pos"):
            x = 0.707106781 * (x + self.embed_pos.embedding_weight)
        return math.sqrt(width) * x


class ReferenceACT(nn.Module):
    def __init__(self, cfg: dict[str, Any], seq_len: int, vocab: int, identifiers: int) -> None:
        super().__init__()
        self.inner = ReferenceInner(cfg, seq_len, vocab, identifiers)


class ReferenceLossHead(nn.Module):
    """What the reference's pretrain.py saves: the loss head around the ACT model."""

    def __init__(self, cfg: dict[str, Any], seq_len: int, vocab: int, identifiers: int) -> None:
        super().__init__()
        self.model = ReferenceACT(cfg, seq_len, vocab, identifiers)

    @torch.no_grad()
    def evaluate(self, inputs: Tensor, identifiers: Tensor) -> tuple[Tensor, Tensor]:
        """Logits [B, seq_len, vocab] and q_halt [B] after all supervision steps."""
        net, cfg = self.model.inner, self.model.inner.cfg
        x = net.embed(inputs, identifiers)
        rotary = net.rotary()
        z_H = net.H_init.float().expand_as(x).clone()
        z_L = net.L_init.float().expand_as(x).clone()
        for _step in range(cfg["halt_max_steps"]):
            for _h in range(cfg["H_cycles"]):
                for _l in range(cfg["L_cycles"]):
                    z_L = net.L_level(z_L, z_H + x, rotary)
                z_H = net.L_level(z_H, z_L, rotary)
        logits = net.lm_head(z_H)[:, net.prefix :]
        return logits, net.q_head(z_H[:, 0])[:, 0]


def randomise(module: nn.Module, seed: int) -> None:
    """Every tensor of ``module``'s state (buffers included) drawn at random, a matrix with
    standard deviation 1/sqrt(its input width) as the reference initialises them."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in module.state_dict().values():
            scale = tensor.shape[-1] ** -0.5 if tensor.ndim == 2 else 1.0
            noise = torch.randn(tensor.shape, generator=generator) * scale
            tensor.copy_(noise.to(tensor.dtype))
