"""The TRM network, its losses, optimizers and weight averaging."""

from __future__ import annotations

from .dense_optimizer import DenseOptimizer, choose_dense_optimizer
from .ema import EMA
from .losses import (
    IGNORE_LABEL_ID,
    ACTLoss,
    act_loss,
    softmax_cross_entropy,
    stablemax_cross_entropy,
    stablemax_log_probs,
)
from .optim import BUILT_IN_OPTIMIZERS, AdamATan2, build_optimizers, lr_at_step
from .sparse_embedding import SignSGDSparse, SparsePuzzleEmbedding
from .trm import TinyRecursiveModel, TRMCarry, puzzle_prefix_len

__all__ = [
    "BUILT_IN_OPTIMIZERS",
    "EMA",
    "IGNORE_LABEL_ID",
    "ACTLoss",
    "AdamATan2",
    "DenseOptimizer",
    "SignSGDSparse",
    "SparsePuzzleEmbedding",
    "TRMCarry",
    "TinyRecursiveModel",
    "act_loss",
    "build_optimizers",
    "choose_dense_optimizer",
    "lr_at_step",
    "puzzle_prefix_len",
    "softmax_cross_entropy",
    "stablemax_cross_entropy",
    "stablemax_log_probs",
]


def build_model(arch, dataset, position_major: bool | None = None) -> TinyRecursiveModel:
    """The TRM of ``arch`` (an ArchSpec) for a dataset of ``dataset``'s shape (a
    :class:`trm.data.shape.DatasetShape`). ``position_major``: the MLP variant's layout
    (None: position-major; ignored for the attention variant, which has one layout)."""
    layout = position_major if arch.mlp_t else None
    return TinyRecursiveModel(arch, **dataset.model_kwargs(), position_major=layout)


__all__ += ["build_model"]
