"""The loop: :class:`~trm.train.loop.Trainer` and the parts it is made of (a step, the OOM
retry, checkpoints, the metrics log, signals, evaluation).

The package is callable: ``trm.train(spec, ...)`` is the public API's
:func:`trm.api.training.train` (:class:`trm.TrainPackage` says why)."""

import sys

from trm import TrainPackage
from trm.errors import TrainingFailed
from trm.train.loop import Trainer

sys.modules[__name__].__class__ = TrainPackage

__all__ = ["Trainer", "TrainingFailed"]
