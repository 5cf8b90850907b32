"""Muon (Jordan et al. 2024) as ``train.optimizer = "muon"``, split by parameter kind as
Speed is Confidence (Dillon 2026, arXiv 2601.19085) trains TRM: ``torch.optim.Muon`` for the
network's hidden weight matrices, AdamW (``torch.optim.AdamW``) for everything else.

Which parameter goes where (the paper's rule, on trm's parameter names): a 2-D parameter
whose name holds neither ``embed`` nor ``head`` is Muon's (the SwiGLU and attention
projections of ``net``); the token and position embeddings, ``lm_head``, ``q_head`` (weight
and bias) and any 1-D parameter are AdamW's. The puzzle-embedding table is a buffer trained
by its own sparse sign-SGD (``train.puzzle_emb_lr``), built beside every dense optimizer,
this one included.

Settings: Muon takes ``train.muon_lr`` (0.02), ``train.muon_momentum`` (0.6, Nesterov),
``train.muon_weight_decay`` (0.005) and ``train.muon_ns_steps`` (3 Newton-Schulz steps), with
torch's learning-rate scaling by shape (``sqrt(max(1, rows / columns))``, the paper's
"original"); AdamW takes ``train.lr``, ``(train.beta1, train.beta2)`` and
``train.weight_decay`` (the paper: 1e-4, (0.9, 0.95), 1.0). Both follow the run's schedule
(warmup, cosine) from their own base learning rate.

State: Muon keeps one float32 momentum buffer per element of its matrices, AdamW two moments
per element of the rest (:func:`muon_state_bytes`, counted exactly by the memory estimate).
torch has ``torch.optim.Muon`` from 2.9; on an older torch the entry is offered but refused
with one line saying so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from trm import hookimpl
from trm.model import DenseOptimizer
from trm.model.optim import fused_adamw_supported

if TYPE_CHECKING:
    from trm.spec import TrainSpec

ACTIVATION = "default"
TORCH_NEEDED = "2.9"
# One float32 momentum buffer per element of a Muon matrix; AdamW's two moments elsewhere.
MUON_STATE_BYTES_PER_ELEMENT = 4
COMPANION_STATE_BYTES_PER_ELEMENT = 8
# Names that keep a 2-D parameter off Muon (the paper's rule).
NOT_MUON_WORDS = ("embed", "head")


def is_muon_parameter(name: str, shape: Sequence[int]) -> bool:
    """Whether the parameter ``name`` of ``shape`` is updated by Muon: a matrix (2-D) whose
    name holds neither ``embed`` nor ``head``."""
    return len(shape) == 2 and not any(word in name for word in NOT_MUON_WORDS)


def missing_reason() -> str | None:
    """None when this torch has ``torch.optim.Muon``, else the one sentence to show."""
    if hasattr(torch.optim, "Muon"):
        return None
    return (
        f"torch {torch.__version__} has no torch.optim.Muon; it needs torch {TORCH_NEEDED} or "
        "newer (pip install -U torch)"
    )


def build_muon(named: list[tuple[str, torch.nn.Parameter]], train: TrainSpec) -> list[Any]:
    """``[AdamW over the rest, Muon over the hidden matrices]`` (either left out when it has
    no parameter), each param group carrying its own ``"base_lr"``."""
    muon_params = [p for name, p in named if is_muon_parameter(name, p.shape)]
    rest = [p for name, p in named if not is_muon_parameter(name, p.shape)]
    optimizers: list[Any] = []
    if rest:
        companion = torch.optim.AdamW(
            rest,
            lr=train.lr,
            betas=(train.beta1, train.beta2),
            weight_decay=train.weight_decay,
            fused=fused_adamw_supported(rest) or None,
        )
        companion.param_groups[0]["base_lr"] = train.lr
        optimizers.append(companion)
    if muon_params:
        muon = torch.optim.Muon(
            muon_params,
            lr=train.muon_lr,
            weight_decay=train.muon_weight_decay,
            momentum=train.muon_momentum,
            nesterov=True,
            ns_steps=train.muon_ns_steps,
        )
        muon.param_groups[0]["base_lr"] = train.muon_lr
        optimizers.append(muon)
    return optimizers


def muon_state_bytes(shapes: Sequence[tuple[str, tuple[int, ...]]]) -> int:
    """Exact optimizer state bytes: 4 per element of Muon's matrices, 8 per element of the
    companion AdamW's parameters (step counters are scalars per tensor, not counted)."""
    total = 0
    for name, shape in shapes:
        rate = (
            MUON_STATE_BYTES_PER_ELEMENT
            if is_muon_parameter(name, shape)
            else COMPANION_STATE_BYTES_PER_ELEMENT
        )
        total += rate * math.prod(shape)
    return total


@hookimpl
def dense_optimizers() -> list[DenseOptimizer]:
    """Muon with its AdamW companion; refused in one line where torch lacks Muon."""
    return [
        DenseOptimizer(
            "muon",
            build_muon,
            COMPANION_STATE_BYTES_PER_ELEMENT,
            "Muon for the hidden weight matrices, AdamW for embeddings, heads and biases "
            "(Speed is Confidence's split; torch.optim.Muon)",
            unavailable_reason=missing_reason(),
            takes_names=True,
            state_bytes=muon_state_bytes,
        )
    ]
