"""The one place that branches on the kind of device: cpu, cuda or mps.

Everything else in trm speaks of "the device" and calls these modules:

- :mod:`~trm.device.transfer`: host arrays to device tensors, autocast, synchronising;
- :mod:`~trm.device.memory`: freeing cached memory, the step's peak device memory (the core
  resets the peak counter; plugins only read), memory pressure, a device's memory budget;
- :mod:`~trm.device.oom`: recognising out-of-memory errors of every backend;
- :mod:`~trm.device.rng`: capturing and restoring every RNG a run draws from;
- :mod:`~trm.device.compile`: whether and how torch.compile runs;
- :mod:`~trm.device.host_memory`: keeping freed host memory for reuse (glibc).

A new backend adds its branches here and a backend plugin (``configure_runtime``).
"""
