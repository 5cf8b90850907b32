"""The built-in dense optimizers (AdamATan2, AdamW), building a run's optimizers, and the
learning-rate schedule of TRM training."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from ..spec import TrainSpec
from .dense_optimizer import DenseOptimizer, build_checked, choose_dense_optimizer
from .sparse_embedding import SignSGDSparse


class AdamATan2(torch.optim.Optimizer):
    """Adam with ``atan2`` in place of the epsilon-guarded division (Everett et al. 2024).

    Per parameter, with step t, m and v Adam's moments (m₀ = v₀ = 0)::

        p = p * (1 - lr * weight_decay)              # decoupled weight decay
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g²
        p = p - lr / (1 - beta1ᵗ) * atan2(m, sqrt(v / (1 - beta2ᵗ)))

    This follows the ``adam-atan2`` package the reference trains with (imoneoi/adam-atan2,
    CUDA kernel): no extra scale constants (lucidrains' ``a = 1.27, b = 1`` are not used),
    and the first-moment bias correction scales the step rather than sitting inside atan2.
    There is no eps: with zero gradient history atan2(0, 0) = 0, and every step is bounded
    by ``lr / (1 - beta1ᵗ) * pi / 2``. Set ``param_groups[i]["lr"]`` freely between steps.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        weight_decay: float = 0.1,
    ) -> None:
        if lr < 0 or weight_decay < 0:
            raise ValueError(f"lr and weight_decay must be >= 0, got {lr}, {weight_decay}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})
        # Each parameter's step count as a Python int, mirroring ``state[p]["step"]`` (the
        # tensor checkpoints hold): the bias corrections need it on the host every step, and
        # reading the tensor would be a host read per parameter. Filled from the tensor the
        # first time a parameter steps after construction or loading.
        self._step_counts: dict[int, int] = {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._step_counts.clear()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.is_sparse:
                    raise RuntimeError("AdamATan2 does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    self._step_counts[id(p)] = 0
                elif id(p) not in self._step_counts:  # loaded: one read, then counted here
                    self._step_counts[id(p)] = int(state["step"])
                state["step"] += 1
                self._step_counts[id(p)] += 1
            if len({(p.device, p.dtype) for p in params}) == 1:
                self._update_together(params, group)
            else:
                for p in params:
                    self._update_together([p], group)
        return loss

    def _update_together(self, params: list[torch.Tensor], group: dict[str, Any]) -> None:
        """The update of ``params`` (one device and dtype) with multi-tensor (foreach) ops."""
        lr, wd = group["lr"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        states = [self.state[p] for p in params]
        steps = [self._step_counts[id(p)] for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        grads = [p.grad.to(m.dtype) for p, m in zip(params, exp_avgs, strict=True)]
        torch._foreach_mul_(params, 1.0 - lr * wd)
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denoms, [math.sqrt(1.0 - beta2**t) for t in steps])
        updates = [
            torch.atan2(m, d).to(p.dtype) for m, d, p in zip(exp_avgs, denoms, params, strict=True)
        ]
        torch._foreach_mul_(updates, [-lr / (1.0 - beta1**t) for t in steps])
        torch._foreach_add_(params, updates)


def fused_adamw_supported(params: list[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW kernel can update ``params``: one CUDA or CPU device,
    floating point (fewer kernels and no per-parameter Python loop)."""
    if not params:
        return False
    devices = {p.device for p in params}
    return (
        len(devices) == 1
        and next(iter(devices)).type in ("cuda", "cpu")
        and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params)
    )


def build_adam_atan2(params: list[nn.Parameter], train: TrainSpec) -> torch.optim.Optimizer:
    """AdamATan2 (the reference's optimizer) with ``train.lr``, betas and weight decay."""
    return AdamATan2(
        params, lr=train.lr, betas=(train.beta1, train.beta2), weight_decay=train.weight_decay
    )


def build_adamw(params: list[nn.Parameter], train: TrainSpec) -> torch.optim.Optimizer:
    """torch's AdamW with ``train.lr``, betas and weight decay, fused where
    :func:`fused_adamw_supported`."""
    return torch.optim.AdamW(
        params,
        lr=train.lr,
        betas=(train.beta1, train.beta2),
        weight_decay=train.weight_decay,
        fused=fused_adamw_supported(params) or None,
    )


# Adam's two float32 moments per element (its step counts are one scalar per tensor).
ADAM_STATE_BYTES_PER_ELEMENT = 8

ADAM_ATAN2 = DenseOptimizer(
    "adam_atan2",
    build_adam_atan2,
    ADAM_STATE_BYTES_PER_ELEMENT,
    "AdamATan2: Adam with atan2 in place of the epsilon division (the reference's optimizer)",
)
ADAMW = DenseOptimizer(
    "adamw",
    build_adamw,
    ADAM_STATE_BYTES_PER_ELEMENT,
    "AdamW (torch.optim.AdamW, fused where torch has the kernel)",
)
# What the built-in plugin trm.plugins.optimizers.adam offers, and what build_optimizers and
# the memory estimator choose from when no plugin manager chose an entry for them.
BUILT_IN_OPTIMIZERS = (ADAM_ATAN2, ADAMW)


def build_optimizers(
    model: nn.Module, train: TrainSpec, dense: DenseOptimizer | None = None
) -> list[Any]:
    """``[SignSGDSparse for the puzzle table (if the model has one), dense optimizer]``.

    The dense optimizer is ``dense`` (the entry the run's plugins offer for
    ``train.optimizer``; None: the built-in entry of that name, ``adam_atan2`` or ``adamw``)
    built over every trainable parameter with ``train.lr``, ``(beta1, beta2)`` and
    ``weight_decay`` (an entry that ``takes_names`` may build several, one per kind of
    parameter: all follow the sparse one in the list); the sparse one gets
    ``puzzle_emb_lr``/``puzzle_emb_weight_decay``. Each param group records its base learning
    rate under ``"base_lr"`` for :func:`lr_at_step` (``train.lr`` unless the entry set one).
    TrmError when ``dense`` is None and the name is not built in, and when its build fails or
    makes no optimizer (:func:`~trm.model.dense_optimizer.build_checked`).
    """
    if dense is None:
        dense = choose_dense_optimizer(BUILT_IN_OPTIMIZERS, train.optimizer)
    optimizers: list[Any] = []
    puzzle_emb = getattr(model, "puzzle_emb", None)
    if puzzle_emb is not None:
        sparse = SignSGDSparse(
            puzzle_emb, lr=train.puzzle_emb_lr, weight_decay=train.puzzle_emb_weight_decay
        )
        sparse.param_groups[0]["base_lr"] = train.puzzle_emb_lr
        optimizers.append(sparse)
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    params = named if dense.takes_names else [p for _, p in named]
    for dense_optimizer in build_checked(dense, params, train):
        for group in dense_optimizer.param_groups:
            group.setdefault("base_lr", train.lr)
        optimizers.append(dense_optimizer)
    return optimizers


def lr_at_step(
    step: int, train: TrainSpec, total_steps: int, base_lr: float | None = None
) -> float:
    """Learning rate for update number ``step`` (``base_lr`` defaults to ``train.lr``).

    Linear warmup ``base * step / max(1, warmup)`` while ``step < lr_warmup_steps``, then
    cosine from ``base`` at ``step == warmup`` to ``base * lr_min_ratio`` at
    ``step == total_steps`` (held there after).
    """
    base = train.lr if base_lr is None else base_lr
    warmup = train.lr_warmup_steps
    if step < warmup:
        return base * step / max(1, warmup)
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    min_ratio = train.lr_min_ratio
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return base * (min_ratio + max(0.0, (1.0 - min_ratio) * cosine))
