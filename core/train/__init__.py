"""The loop: :class:`~trm.train.loop.Trainer` and the parts it is made of (a step, the OOM
retry, checkpoints, the metrics log, signals, evaluation)."""

from trm.errors import TrainingFailed
from trm.train.loop import Trainer

__all__ = ["Trainer", "TrainingFailed"]
