"""The built-in dense optimizers: ``adam_atan2`` (the reference's AdamATan2) and ``adamw``.

On by default. Both are defined in :mod:`trm.model.optim` and keep two float32 moments per
parameter element; this plugin offers them through the ``dense_optimizers`` hook, the way an
optimizer plugin of a third party offers its own.
"""

from __future__ import annotations

from trm import hookimpl
from trm.model import BUILT_IN_OPTIMIZERS, DenseOptimizer

ACTIVATION = "default"


@hookimpl
def dense_optimizers() -> list[DenseOptimizer]:
    """AdamATan2 and AdamW."""
    return list(BUILT_IN_OPTIMIZERS)
