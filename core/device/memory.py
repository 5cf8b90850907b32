"""Device memory across the backends: which devices a machine has.

Per-device memory (caches, the step's peak, pressure, budgets) is the backend's
(:class:`trm.device.contract.DeviceBackend`). The core owns the peak counter: the loop calls
``backend.begin_step`` before every optimizer step and ``backend.step_peak_mb`` after it, so
``mem_device_mb`` in metrics.jsonl is the peak of that step. Plugins read
``backend.used_fraction``; they never reset a counter.
"""

from __future__ import annotations

from collections.abc import Iterable

from trm.device.contract import HOST, DeviceBackend
from trm.hardware import HardwareProfile


def machine_devices(
    hardware: HardwareProfile, backends: Iterable[DeviceBackend]
) -> list[tuple[str, DeviceBackend]]:
    """Every device of this machine that a loaded, available backend can use, each once with
    the backend that knows it, the host first."""
    found: dict[str, DeviceBackend] = {}
    for backend in sorted(backends, key=lambda b: b.uses_device_memory()):
        if backend.unavailable_reason() is not None:
            continue
        for device in backend.machine_devices(hardware):
            found.setdefault(device, backend)
    return list(found.items()) or [("cpu", HOST)]
