"""Measuring for the core's own planning: model FLOPs (:mod:`~trm.measure.flops`), the real
loop timed step by step (:mod:`~trm.measure.loop_timing`, :mod:`~trm.measure.stage_speed`:
the timer of a wall-time budget) and the per-machine cache of measured speeds
(:mod:`~trm.measure.machine`). ``trm bench`` and ``trm analyze`` are the ``measure`` plugin."""
