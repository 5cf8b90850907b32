"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") as
``train.optimizer = "lion"``, from the ``lion-pytorch`` package (``pip install 'trm[lion]'``).

On by default; when the package is missing, the entry is still offered, so a spec naming it
is refused with one line saying what to install. Lion keeps one float32 moment per parameter
element (Adam keeps two). It takes the spec's ``train.lr``, ``(train.beta1, train.beta2)`` and
``train.weight_decay`` as they are; the package's advice (docs/contrib.md) is a learning rate
3-10x smaller and a weight decay 3-10x larger than AdamW's, and betas (0.9, 0.99).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from trm import hookimpl
from trm.model import DenseOptimizer

if TYPE_CHECKING:
    import torch

    from trm.spec import TrainSpec

ACTIVATION = "default"
PACKAGE = "lion_pytorch"
MISSING = "the lion-pytorch package is not installed; pip install 'trm[lion]'"
# One float32 moment (the momentum ``exp_avg``) per parameter element.
LION_STATE_BYTES_PER_ELEMENT = 4


def build_lion(params: list[torch.nn.Parameter], train: TrainSpec) -> torch.optim.Optimizer:
    """lion-pytorch's Lion over ``params`` with ``train.lr``, betas and weight decay (its
    weight decay multiplies each parameter by ``1 - lr * weight_decay`` per step, as
    AdamATan2's and AdamW's do)."""
    from lion_pytorch import Lion

    return Lion(
        params, lr=train.lr, betas=(train.beta1, train.beta2), weight_decay=train.weight_decay
    )


@hookimpl
def dense_optimizers() -> list[DenseOptimizer]:
    """Lion; marked unavailable (with the extra to install) when lion-pytorch is missing."""
    missing = importlib.util.find_spec(PACKAGE) is None
    return [
        DenseOptimizer(
            "lion",
            build_lion,
            LION_STATE_BYTES_PER_ELEMENT,
            "Lion: the sign of an interpolated momentum (lion-pytorch)",
            unavailable_reason=MISSING if missing else None,
        )
    ]
