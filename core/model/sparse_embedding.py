"""The puzzle-embedding table and its sign-SGD optimizer.

The table can be large (one row per puzzle identifier) while a batch touches few rows, so it
is a buffer, not a parameter: dense optimizers and ``model.parameters()`` never see it. In
training, each forward copies the batch's rows into a fresh leaf tensor that autograd fills
with a gradient; :class:`SignSGDSparse` then updates only those rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .layers import trunc_normal_


class SparsePuzzleEmbedding(nn.Module):
    """Table ``weights`` [num_identifiers, ndim] (a persistent buffer) looked up by id.

    ``forward(ids [B]) -> [B, ndim]``. In eval mode, or with grad disabled, it returns
    ``weights[ids]`` (no gradient reaches the table). In training with grad enabled it returns
    a new leaf tensor ``local_weights`` (requires_grad) holding a copy of those rows, and
    records ``(local_ids, local_weights)`` in ``pending`` so that several micro-batch
    forward/backward passes can accumulate before one optimizer step; the optimizer's
    ``zero_grad`` clears ``pending``. ``local_weights``/``local_ids`` are the latest call's
    (plain attributes, not buffers: their batch size changes between calls).
    """

    def __init__(self, num_identifiers: int, ndim: int, init_std: float = 0.0) -> None:
        super().__init__()
        self.num_identifiers = num_identifiers
        self.ndim = ndim
        self.register_buffer(
            "weights", trunc_normal_(torch.empty(num_identifiers, ndim), std=init_std)
        )
        self.local_weights: Tensor | None = None
        self.local_ids: Tensor | None = None
        self.pending: list[tuple[Tensor, Tensor]] = []

    def forward(self, ids: Tensor) -> Tensor:
        ids = ids.reshape(-1)
        if not self.training or not torch.is_grad_enabled():
            return self.weights[ids]
        local = self.weights[ids].detach().clone().requires_grad_(True)
        self.local_weights, self.local_ids = local, ids.detach()
        self.pending.append((self.local_ids, local))
        return local

    def clear_pending(self) -> None:
        """Forget the recorded lookups (and their gradients)."""
        self.pending.clear()
        self.local_weights = None
        self.local_ids = None

    def extra_repr(self) -> str:
        return f"num_identifiers={self.num_identifiers}, ndim={self.ndim}"


def summed_per_id(ids: Tensor, grads: Tensor) -> Tensor:
    """For each lookup ``i``, the sum of ``grads`` over every lookup of the same id:
    ``out[i] = sum_j [ids[j] == ids[i]] * grads[j]``, shape ``grads.shape`` (float32).

    One matrix product with the lookups' equality mask: the same work in the same order on
    every device and every rank, whatever order the gradients arrived in (``index_add_``
    sums with atomics on CUDA, so near-zero sums could take different signs on different
    ranks), and of a shape fixed by the batch. Lookups of one id get the same sum, so the
    row written back is the same whichever duplicate writes last. The mask is
    ``N x N`` for ``N`` lookups (the global batch: 768 in the paper's recipes, 2.4 MB).
    """
    same = (ids.reshape(-1, 1) == ids.reshape(1, -1)).to(torch.float32)
    return same @ grads.to(torch.float32)


class SignSGDSparse:
    """Sign-SGD with decoupled weight decay on the rows of a :class:`SparsePuzzleEmbedding`.

    ``step()`` sums the gradients of every lookup recorded since ``zero_grad()`` per
    id, then for those rows only: ``w = w * (1 - lr * weight_decay) - lr * sign(grad_sum)``.
    The sums are deterministic and of fixed shape (:func:`summed_per_id`): no ``torch.unique``
    (a host sync, and a new shape every step for a lazy-tensor device), no atomics.
    Rows not looked up are untouched (no decay). Lookups whose tensor got no gradient are
    skipped. The learning rate is ``param_groups[0]["lr"]`` unless ``step(lr)`` is given,
    so a loop can drive it like a torch optimizer. It keeps no moments.

    ``gather_lookups`` (None: one process) is set by a data-parallel loop: it gets this
    process's looked-up ids [N] and their gradients [N, ndim] and returns every process's,
    concatenated in rank order, so that every process applies the same update — the one a
    single process would apply to the whole global batch. Under it, ``step`` is a collective:
    every process calls it, with or without lookups of its own.
    """

    def __init__(
        self, embedding: SparsePuzzleEmbedding, lr: float = 1e-2, weight_decay: float = 0.1
    ) -> None:
        if lr < 0 or weight_decay < 0:
            raise ValueError(f"lr and weight_decay must be >= 0, got {lr}, {weight_decay}")
        self.embedding = embedding
        self.param_groups: list[dict[str, Any]] = [{"lr": lr, "weight_decay": weight_decay}]
        self.gather_lookups: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None

    @torch.no_grad()
    def step(self, lr: float | None = None) -> None:
        """Apply one update from the accumulated lookups; does not clear them."""
        group = self.param_groups[0]
        lr = group["lr"] if lr is None else lr
        pairs = [(ids, t.grad) for ids, t in self.embedding.pending if t.grad is not None]
        if not pairs and self.gather_lookups is None:
            return
        weights = self.embedding.weights
        if pairs:
            all_ids = torch.cat([ids for ids, _ in pairs]).to(weights.device)
            all_grads = torch.cat([g for _, g in pairs]).to(weights.device, torch.float32)
        else:  # no lookups here, but the other processes' must still be gathered
            all_ids = torch.zeros(0, dtype=torch.int64, device=weights.device)
            all_grads = torch.zeros(0, weights.shape[1], device=weights.device)
        if self.gather_lookups is not None:
            all_ids, all_grads = self.gather_lookups(all_ids, all_grads)
            if all_ids.numel() == 0:
                return
        grad_sum = summed_per_id(all_ids, all_grads)
        decay = 1.0 - lr * group["weight_decay"]
        updated = weights[all_ids] * decay - lr * grad_sum.sign()
        weights[all_ids] = updated.to(weights.dtype)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the recorded lookups and their gradients (``set_to_none`` is accepted, unused)."""
        del set_to_none
        self.embedding.clear_pending()

    def state_dict(self) -> dict[str, Any]:
        """Hyper-parameters only; sign-SGD keeps no per-row state."""
        return {"param_groups": [dict(g) for g in self.param_groups]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.param_groups = [dict(g) for g in state["param_groups"]]
