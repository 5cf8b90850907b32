"""The public Python API: ``trm.train``, ``trm.load``, ``trm.estimate`` and the values they
return (:class:`Run`, :class:`Model`, :class:`Solution`, :class:`Estimate`).

The CLI is a thin layer over this package (``trm run``, ``trm solve``/``trm eval``, ``trm
estimate`` call the functions behind these names), so a script gets exactly what the
command does, and the same :class:`~trm.errors.TrmError` messages. docs/python-api.md
documents every name. ``import trm`` does not import this package (it imports torch); the
names are resolved on first use (``trm.__getattr__``; ``trm.train`` imports it when called).
"""

from __future__ import annotations

from trm.api.estimating import Estimate, estimate
from trm.api.model import Model, Solution, load
from trm.api.run import Run, RunSummary
from trm.api.training import train

__all__ = ["Estimate", "Model", "Run", "RunSummary", "Solution", "estimate", "load", "train"]
