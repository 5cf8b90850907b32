"""Scoring a model: exact and cell accuracy over a split with the task's own evaluators
(:mod:`~trm.evaluation.evaluate`, used by the loop, ``trm eval`` and the Python API), and
held-out puzzles generated again from a shipped model's recipe
(:mod:`~trm.evaluation.held_out`)."""
