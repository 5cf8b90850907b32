"""Measuring the machine and a run's speed: model FLOPs, the matmul peak, the machine
benchmark of ``trm analyze --benchmark`` and the speed figures of ``trm analyze``, and
``trm bench`` (which runs the real loop, so it sits above :mod:`trm.train`)."""
