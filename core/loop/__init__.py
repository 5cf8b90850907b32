"""The training loop: :class:`~trm.loop.loop.Trainer` and the parts it is made of (a step,
the OOM retry, checkpoints, the metrics log, signals, the rank agreements of a data-parallel
step). The public entry point is :func:`trm.train` (:mod:`trm.api.training`)."""

from trm.errors import TrainingFailed
from trm.loop.loop import Trainer

__all__ = ["Trainer", "TrainingFailed"]
