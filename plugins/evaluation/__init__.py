"""The ``evaluation`` plugin (:mod:`.plugin`): ``trm eval`` (a model's scores on held-out
puzzles, a shipped model's on each kind its manifest lists: :mod:`.held_out`) and ``trm solve``
(one puzzle or task), both in :mod:`.eval_cmd`. They score through the core's evaluation
(``trm.evaluation``) and load models through the Python API (``trm.api.model``).
"""
