"""The ``measure`` plugin (:mod:`.plugin`): ``trm bench`` (training speed, GFLOP/s and MFU of a
spec, against a plain eager fp32 loop: :mod:`.bench`, with the matmul peak of :mod:`.peak`
and the datasheet peaks of :mod:`.datasheet`; the timed loops are the core's
``trm.measure.loop_timing``) and ``trm analyze`` (the machine's profile, its measured speeds
(:mod:`.machine_speed`), and the spec fitted to each tier with its measured speed:
:mod:`.run_speed`, :mod:`.speed`).
"""
