"""Winner-take-all latents (``train.latent_candidates = K``), as Speed is Confidence (Dillon
2026, arXiv 2601.19085) trains TRM: K reasoning states per puzzle, one trained.

Each row of the carry holds one answer state ``z_H`` [P, D] and K reasoning states ``z_L``
[K, P, D]. A supervision step runs the recursion once per candidate (the K copies of a row
side by side in one batch of B x K rows), all from the row's shared ``z_H`` and each from its
own ``z_L``. Per puzzle, the *winner* is the candidate whose token loss (the run's own,
``arch.loss``, averaged over the row's labelled cells, as the training loss counts it) is
lowest; the step's outputs are the winner's, so the ACT loss (its answer, its Q-halt target:
whether the winner's answer is exactly right) and its gradient flow through the winner
alone. The next step starts from the winner's ``z_H`` copied to every candidate and each
candidate's own ``z_L`` (the paper's "copy" / "all" carry policy); the row halts by the
winner's Q head, as a whole puzzle.

A row that restarts takes ``z_H = H_init``; candidate 0 takes ``z_L = L_init`` (the plain
model's start, the one evaluation runs from) and candidates 1..K-1 fresh truncated-normal
draws (std 1), one vector a candidate broadcast over the positions as ``L_init`` is (the
paper's "fresh" variant draws one per position, its "fixed" one a learned-free buffer per
candidate; it reports both at 96.9%), aligned as the paper aligns them: each draw's
component in the span of the top singular directions of the first layer's SwiGLU input
projection is rescaled so that its share of the vector equals candidate 0's, its length kept
(:func:`align_to_first`). Evaluation runs one pass from candidate 0, as the paper evaluates
("at inference, we run just one"): nothing in evaluation changes with K.

With K = 1 the loop does not come here at all: the step is the plain one, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from .layers import trunc_normal_
from .losses import IGNORE_LABEL_ID, TOKEN_LOSSES
from .trm import TinyRecursiveModel, TRMCarry

# How many top singular directions of the first SwiGLU's input projection the alignment uses.
ALIGNED_DIRECTIONS = 10


def initial_carry(model: TinyRecursiveModel, batch: Mapping[str, Tensor], k: int) -> TRMCarry:
    """``model.initial_carry(batch)`` (every row halted) with K reasoning states a row
    (``z_L`` [B, K, P, D]) when ``k > 1``; the plain carry when ``k == 1``."""
    carry = model.initial_carry(batch)
    return fit_carry(carry, k)


def fit_carry(carry: TRMCarry, k: int) -> TRMCarry:
    """``carry`` holding exactly ``k`` reasoning states a row: unchanged when it already
    does (a plain carry for ``k == 1``). A carry of another count (a checkpoint written with
    another ``train.latent_candidates``) keeps its first states, fills the rest with copies
    of state 0 (they differ again once the row restarts), and for ``k == 1`` keeps state 0."""
    z_L = carry.z_L
    have = 1 if z_L.dim() == 3 else z_L.shape[1]
    if have == k and (k > 1) == (z_L.dim() == 4):
        return carry
    first = z_L if z_L.dim() == 3 else z_L[:, 0]
    if k == 1:
        new_z_L = first.clone()
    else:
        kept = z_L[:, : min(have, k)] if z_L.dim() == 4 else first.unsqueeze(1)
        filler = first.unsqueeze(1).expand(-1, k - kept.shape[1], -1, -1)
        new_z_L = torch.cat([kept, filler], dim=1).contiguous()
    return TRMCarry(
        z_H=carry.z_H,
        z_L=new_z_L,
        steps=carry.steps,
        halted=carry.halted,
        current_data=carry.current_data,
    )


def top_input_directions(model: TinyRecursiveModel) -> Tensor:
    """[D, r] orthonormal columns: the top ``r = min(10, D)`` right singular vectors of the
    first layer's SwiGLU input projection (``net.layers[0].mlp.gate_up``), in float32."""
    weight = model.net.layers[0].mlp.gate_up.weight.detach().float()
    _, _, vh = torch.linalg.svd(weight, full_matrices=False)
    return vh[:ALIGNED_DIRECTIONS].T.contiguous()


def align_to_first(z: Tensor, directions: Tensor, eps: float = 1e-8) -> Tensor:
    """``z`` [..., K, D] with candidates 1..K-1 aligned to candidate 0 (returned in z's dtype).

    For each vector v of candidates 1..K-1, with ``a`` the norm of candidate 0's unit vector
    projected on ``directions`` [D, r] (orthonormal columns): v's component in their span is
    rescaled to length ``a * |v_perp| / sqrt(1 - a^2)`` (so the new vector's projected share
    of its length is ``a``), then the vector is scaled back to v's length.
    """
    zf = z.float()
    ref = zf[..., :1, :]
    ref_unit = ref / ref.norm(dim=-1, keepdim=True).clamp_min(eps)
    target = (ref_unit @ directions).norm(dim=-1, keepdim=True)  # [..., 1, 1]
    rest = zf[..., 1:, :]
    parallel = (rest @ directions) @ directions.T
    perp = rest - parallel
    want = target * perp.norm(dim=-1, keepdim=True) / (1 - target.square()).clamp_min(eps).sqrt()
    length = parallel.norm(dim=-1, keepdim=True)
    parallel = torch.where(length > eps, parallel / length.clamp_min(eps) * want, parallel)
    aligned = parallel + perp
    aligned = aligned / aligned.norm(dim=-1, keepdim=True).clamp_min(eps)
    aligned = aligned * rest.norm(dim=-1, keepdim=True)
    return torch.cat([ref, aligned], dim=-2).to(z.dtype)


def reset_carry(
    model: TinyRecursiveModel, carry: TRMCarry, batch: Mapping[str, Tensor]
) -> TRMCarry:
    """Halted rows restart (see the module docstring): new data, steps 0, ``z_H = H_init``,
    candidate 0 from ``L_init``, the others fresh aligned draws (global torch RNG, drawn for
    every row so the draws do not depend on which rows halted). Other rows are kept."""
    z_L = carry.z_L  # [B, K, P, D]
    rows, k, positions, hidden = z_L.shape
    fresh = torch.empty(rows, k - 1, hidden, device=z_L.device, dtype=torch.float32)
    trunc_normal_(fresh, std=1.0)
    first = model.L_init.float().expand(rows, 1, hidden)
    start = align_to_first(torch.cat([first, fresh], dim=1), _directions(model))
    start = start.to(z_L.dtype).unsqueeze(2).expand(rows, k, positions, hidden)
    plain = model.reset_carry(
        TRMCarry(
            z_H=carry.z_H,
            z_L=z_L[:, 0],
            steps=carry.steps,
            halted=carry.halted,
            current_data=carry.current_data,
        ),
        batch,
    )
    restart = carry.halted.view(-1, 1, 1, 1)
    return TRMCarry(
        z_H=plain.z_H,
        z_L=torch.where(restart, start, z_L),
        steps=plain.steps,
        halted=plain.halted,
        current_data=plain.current_data,
    )


def _directions(model: TinyRecursiveModel) -> Tensor:
    """:func:`top_input_directions` on the model's device, computed once per update of the
    weight (kept on the model with the weight's in-place version, which an optimizer step
    bumps), not once per micro-batch."""
    weight = model.net.layers[0].mlp.gate_up.weight
    key = (id(weight), weight._version)
    cached = getattr(model, "_candidate_directions", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    directions = top_input_directions(model).to(model.L_init.device)
    model._candidate_directions = (key, directions)
    return directions


def candidate_losses(logits: Tensor, labels: Tensor, loss_kind: str) -> Tensor:
    """Per row [N] float32: the ``loss_kind`` token loss averaged over the row's labelled
    cells (0 for a row without labels), as :class:`trm.model.ACTLoss` counts a row's."""
    token_loss = TOKEN_LOSSES[loss_kind]
    counts = (labels != IGNORE_LABEL_ID).sum(-1).clamp_min(1)
    return token_loss(logits, labels, IGNORE_LABEL_ID).sum(-1) / counts


def forward(
    model: TinyRecursiveModel,
    carry: TRMCarry,
    batch: Mapping[str, Tensor],
    *,
    loss_kind: str,
    min_halt_steps: Tensor | None = None,
) -> tuple[TRMCarry, dict[str, Tensor]]:
    """One winner-take-all supervision step on ``carry`` (``z_L`` [B, K, P, D]).

    Returns the new carry (the winner's ``z_H``, every candidate's ``z_L``, detached) and the
    winner's outputs, as :meth:`TinyRecursiveModel.forward` returns them for one state, plus
    ``winner`` (int64 [B], the winning candidate of each row). The outputs' gradient reaches
    the winner's recursion only.
    """
    carry = reset_carry(model, carry, batch)
    data = carry.current_data
    rows, k, positions, hidden = carry.z_L.shape
    repeated = {key: value.repeat_interleave(k, dim=0) for key, value in data.items()}
    z_H, z_L, logits, q_halt, q_continue = model.recurse(
        carry.z_H.repeat_interleave(k, dim=0),
        carry.z_L.reshape(rows * k, positions, hidden),
        repeated,
    )
    with torch.no_grad():
        losses = candidate_losses(logits.detach(), repeated["labels"], loss_kind).view(rows, k)
        winner = losses.argmin(dim=-1)
        picked = torch.arange(rows, device=winner.device) * k + winner
    outputs = {
        "logits": logits[picked],
        "q_halt_logits": q_halt[picked],
        "q_continue_logits": q_continue[picked],
    }
    z_H_won = z_H.detach()[picked]
    z_L_all = z_L.detach().reshape(rows, k, positions, hidden)
    steps, halted = model.halting(
        carry.steps, outputs, z_H_won, z_L_all[torch.arange(rows), winner], data, min_halt_steps
    )
    outputs["winner"] = winner
    new_carry = TRMCarry(z_H=z_H_won, z_L=z_L_all, steps=steps, halted=halted, current_data=data)
    return new_carry, outputs
