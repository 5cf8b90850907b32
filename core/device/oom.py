"""Out-of-memory errors from every backend, recognised in one place.

A step can run out of memory in three ways, each surfacing differently in torch:

- CUDA: ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` in older releases);
- Apple MPS: a ``RuntimeError`` whose message contains "MPS backend out of memory";
- the host: a ``RuntimeError`` from the CPU allocator ("DefaultCPUAllocator: can't allocate
  memory", "not enough memory") or Python's ``MemoryError``.

(On Linux the kernel's OOM killer usually ends a process before any allocation fails; the
memory-guard plugin watches host pressure for that reason.)
"""

from __future__ import annotations

import torch

_OOM_TYPES: tuple[type[BaseException], ...] = tuple(
    t
    for t in (
        getattr(torch, "OutOfMemoryError", None),
        getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None),
        MemoryError,
    )
    if isinstance(t, type)
)
_OOM_MESSAGES = (
    "out of memory",  # CUDA (older releases), MPS, HIP
    "can't allocate memory",  # DefaultCPUAllocator on Linux / macOS
    "not enough memory",  # DefaultCPUAllocator on Windows
    "failed to allocate",
)


def is_out_of_memory(error: BaseException) -> bool:
    """True when ``error`` means an allocation failed (device or host), on any backend."""
    if isinstance(error, _OOM_TYPES):
        return True
    if isinstance(error, RuntimeError):
        text = str(error).lower()
        return any(message in text for message in _OOM_MESSAGES)
    return False


def memory_kind(error: BaseException) -> str:
    """Which memory ran out, in words: "CUDA device", "MPS device" or "host"."""
    text = str(error).lower()
    if "mps" in text:
        return "MPS device"
    if isinstance(error, MemoryError) or "allocator" in text or "can't allocate" in text:
        return "host"
    return "CUDA device"
