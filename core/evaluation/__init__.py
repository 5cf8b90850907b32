"""Scoring a model: exact and cell accuracy over a split with the task's own evaluators
(:mod:`~trm.evaluation.evaluate`, used by the loop, the ``evaluation`` plugin's ``trm eval``
and the Python API)."""
