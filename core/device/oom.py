"""Out-of-memory errors, recognised in one place: the host's here, a device's by its backend.

A step can run out of memory on the host or on the device:

- the host: a ``RuntimeError`` from the CPU allocator ("DefaultCPUAllocator: can't allocate
  memory", "not enough memory") or Python's ``MemoryError``;
- a device: ``torch.OutOfMemoryError`` (torch's own type, raised by its device allocators) or
  whatever the backend's :meth:`~trm.device.contract.DeviceBackend.is_out_of_memory`
  recognises (MPS's "MPS backend out of memory", XLA's ``RESOURCE_EXHAUSTED``).

(On Linux the kernel's OOM killer usually ends a process before any allocation fails; the
memory-guard plugin watches host pressure for that reason.)
"""

from __future__ import annotations

import torch

from trm.device.contract import DeviceBackend

_OOM_TYPES: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "OutOfMemoryError", None), MemoryError) if isinstance(t, type)
)
_HOST_OOM_MESSAGES = (
    "can't allocate memory",  # DefaultCPUAllocator on Linux / macOS
    "not enough memory",  # DefaultCPUAllocator on Windows
)


def is_host_out_of_memory(error: BaseException) -> bool:
    """True when the host's allocator (or Python) could not allocate."""
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, RuntimeError):
        text = str(error).lower()
        return any(message in text for message in _HOST_OOM_MESSAGES)
    return False


def is_out_of_memory(error: BaseException, backend: DeviceBackend | None = None) -> bool:
    """True when ``error`` means an allocation failed: on the host, in torch's own
    out-of-memory type, or on ``backend``'s device as the backend recognises it."""
    if isinstance(error, _OOM_TYPES) or is_host_out_of_memory(error):
        return True
    return backend is not None and backend.is_out_of_memory(error)


def memory_kind(error: BaseException, backend: DeviceBackend | None = None) -> str:
    """Which memory ran out, in words: "host", or the backend's name for its device."""
    if is_host_out_of_memory(error) or backend is None:
        return "host"
    return backend.memory_kind(error)
