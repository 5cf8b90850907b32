"""The device contract and the helpers backends share; no branch on a device kind.

- :mod:`~trm.device.contract`: :class:`DeviceBackend`, the interface each backend plugin
  implements (moving batches, autocast, the step boundary, memory, out-of-memory recognition,
  RNG, compiling, process groups, saving), and :class:`Placement` (backend, device, dtype);
- :mod:`~trm.device.transfer`: pinned, non-blocking copies for devices with a copy engine;
- :mod:`~trm.device.memory`: the devices of a machine, across the loaded backends;
- :mod:`~trm.device.oom`: the host's out-of-memory errors, and a device's through its backend;
- :mod:`~trm.device.rng`: capturing and restoring every RNG a run draws from;
- :mod:`~trm.device.compile`: whether torch.compile can run, compiling the network, and the
  fallback to eager when compiling fails;
- :mod:`~trm.device.host_memory`: keeping freed host memory for reuse (glibc);
- :mod:`~trm.device.distributed`: the process group under torchrun and the collectives.

A new kind of device is a plugin (see docs/plugins.md, "Writing a backend"); nothing here
changes for it.
"""
