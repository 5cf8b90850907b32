"""Token losses (stable-max and softmax cross-entropy) and the ACT loss of TRM.

Every returned loss and metric is a *sum over rows*, never a mean, so micro-batches of one
optimizer step add up; the training loop divides by the global batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_LABEL_ID = -100


def _stablemax_dtype(device: torch.device) -> torch.dtype:
    """float64, except on MPS, which has no float64 (float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


def stablemax_log_probs(logits: Tensor) -> Tensor:
    """``log(s(x) / sum s(x))`` over the last axis, s(x) = 1/(1-x) for x < 0 else x + 1.

    Computed in float64 (float32 on MPS) and returned in that dtype. The negative branch is
    evaluated on ``min(x, 0)`` so neither branch has a pole and gradients stay finite.
    """
    x = logits.to(_stablemax_dtype(logits.device))
    s = torch.where(x < 0, 1.0 / (1.0 - x.clamp(max=0.0)), x + 1.0)
    return torch.log(s / s.sum(dim=-1, keepdim=True))


def _gather_nll(log_probs: Tensor, labels: Tensor, ignore_index: int) -> Tensor:
    mask = labels != ignore_index
    safe = torch.where(mask, labels, torch.zeros_like(labels)).long()
    picked = log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, -picked, torch.zeros_like(picked))


def stablemax_cross_entropy(
    logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_LABEL_ID
) -> Tensor:
    """Per-token stable-max cross-entropy [..., ] float32, 0 where ``labels == ignore_index``."""
    return _gather_nll(stablemax_log_probs(logits), labels, ignore_index).float()


def softmax_cross_entropy(
    logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_LABEL_ID
) -> Tensor:
    """Per-token softmax cross-entropy (float32 log-softmax), 0 where ignored."""
    return _gather_nll(F.log_softmax(logits.float(), dim=-1), labels, ignore_index)


TOKEN_LOSSES: dict[str, Callable[..., Tensor]] = {
    "stablemax": stablemax_cross_entropy,
    "softmax": softmax_cross_entropy,
}


class ACTLoss:
    """The TRM training objective for one supervision step (stateless)."""

    @staticmethod
    def compute(
        outputs: Mapping[str, Tensor],
        labels: Tensor,
        halted: Tensor,
        loss_kind: str = "stablemax",
        steps: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss sum and metric sums for ``outputs`` of :class:`TinyRecursiveModel`.

        ``labels`` [B, seq_len] must be the *new carry's* ``current_data["labels"]`` (the
        data the model actually ran on), ``halted`` [B] and ``steps`` [B] the new carry's.
        ``loss_kind`` is ``stablemax`` or ``softmax``.

        loss = lm_loss + 0.5 * (q_halt_loss + q_continue_loss), where lm_loss sums, over
        rows, the row's mean token loss over labelled cells; q_halt_loss is the summed BCE of
        ``q_halt_logits`` against "the whole row is argmax-correct"; q_continue_loss the
        summed BCE of ``q_continue_logits`` against ``target_q_continue`` when present.

        Metrics (tensor sums over *halted rows with at least one label*): ``count``,
        ``cell_correct`` (sum of per-row correct fractions), ``exact_correct``,
        ``q_halt_correct`` (``q_halt >= 0`` agrees with exact correctness), ``steps`` (only
        when ``steps`` is given); and, over all rows, ``lm_loss``, ``q_halt_loss`` and
        ``q_continue_loss`` (when present), detached.
        """
        try:
            token_loss = TOKEN_LOSSES[loss_kind]
        except KeyError:
            raise ValueError(f"loss_kind must be one of {sorted(TOKEN_LOSSES)}") from None
        logits = outputs["logits"]
        q_halt = outputs["q_halt_logits"]
        mask = labels != IGNORE_LABEL_ID
        counts = mask.sum(-1)
        divisor = counts.clamp_min(1)

        with torch.no_grad():
            is_correct = mask & (logits.argmax(-1) == labels)
            seq_is_correct = is_correct.sum(-1) == counts
            valid = halted & (counts > 0)
            cell_fraction = is_correct.sum(-1).float() / divisor
            metrics: dict[str, Tensor] = {
                "count": valid.sum(),
                "cell_correct": torch.where(valid, cell_fraction, 0.0).sum(),
                "exact_correct": (valid & seq_is_correct).sum(),
                "q_halt_correct": (valid & ((q_halt >= 0) == seq_is_correct)).sum(),
            }
            if steps is not None:
                metrics["steps"] = torch.where(valid, steps, 0).sum()

        lm_loss = (token_loss(logits, labels, IGNORE_LABEL_ID).sum(-1) / divisor).sum()
        q_halt_loss = F.binary_cross_entropy_with_logits(
            q_halt, seq_is_correct.to(q_halt.dtype), reduction="sum"
        )
        metrics["lm_loss"] = lm_loss.detach()
        metrics["q_halt_loss"] = q_halt_loss.detach()
        q_loss = q_halt_loss
        if "target_q_continue" in outputs:
            q_continue_loss = F.binary_cross_entropy_with_logits(
                outputs["q_continue_logits"], outputs["target_q_continue"], reduction="sum"
            )
            metrics["q_continue_loss"] = q_continue_loss.detach()
            q_loss = q_loss + q_continue_loss
        return lm_loss + 0.5 * q_loss, metrics


act_loss = ACTLoss.compute
