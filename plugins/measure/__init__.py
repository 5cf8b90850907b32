"""The ``measure`` plugin (:mod:`.plugin`): ``trm bench`` (training speed, GFLOP/s and MFU of a
spec, against a plain eager fp32 loop; the timed loops are the core's ``trm.measure.bench``)
and ``trm analyze`` (the machine's profile, and the spec fitted to each tier with its measured
speed: :mod:`.run_speed`, :mod:`.speed`).
"""
