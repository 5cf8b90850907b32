"""Shipped models: ``NAME.pt`` (a checkpoint reduced to what inference needs) and ``NAME.json``
(its manifest) per model, read through ``trm.shipped``. Written by
benchmarks/shipped_weights.py; see docs/user-guide.md, "Shipped models"."""
