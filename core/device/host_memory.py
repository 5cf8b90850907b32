"""Host memory reuse: keep the C library from handing large freed blocks back to the kernel.

glibc's ``malloc`` serves every request of 32 MiB or more (and, before its threshold adapts,
of 128 KiB or more) with a fresh ``mmap`` and unmaps it on ``free``. A training step on a CPU
allocates and frees the same large activations dozens of times, so each of them is faulted
in and zeroed by the kernel page by page, every time: on a 2-core Xeon a bf16 product
[1024 x 97] x [97 x 16384] took 10 ms with its 32 MiB output freshly mapped and 2.4 ms with
the memory reused (``benchmarks/bench.py`` shows the whole-step effect).

:func:`reuse_freed_memory` switches glibc to serve large blocks from its heap and to keep
freed heap memory instead of trimming it (``mallopt``: ``M_MMAP_MAX`` 0, ``M_TRIM_THRESHOLD``
at its largest), so the second step reuses the first step's pages. The process's resident
memory then stays at its high-water mark instead of falling between steps, and the memory
estimator (``plugins/planning/memory_estimator.py``) counts heap slack for large activations too.
Other C libraries (macOS, musl, Windows) are left alone.

Kept memory can fragment: glibc cannot serve an aligned request from a freed block of exactly
the same size, so some allocation patterns leave a hole per round and the heap grows (a loop
of ``torch.ones(16 * 2**20)`` grows by 64 MiB a round). A training step repeats the same
allocations and settles (measured: no page faults and a flat RSS from the third step on), but
nothing guarantees it, so :class:`IdleMemoryValve` bounds the idle part: it learns how much
free memory the heap holds between the first steps (one step's activations) and returns the
idle memory to the kernel (``malloc_trim``) whenever it later exceeds twice that plus 256 MiB.

Within a step, large blocks that no longer go back to the kernel can also raise the peak:
of three ``benchmarks/memory_accuracy.py`` rows measured both ways on a 2-core Xeon, two
peaked within 2% of their peak without reuse, but a compiled bf16 MLP at batch 96 peaked 5%
and 16% higher in two runs. The estimator allows for it (a larger heap slack for
large tensors under reuse), and the extreme tier, which fills memory to about 90%, sets
``runtime.host_memory = "system"`` and runs without reuse.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import sys

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_TRIM_NEVER_BYTES = 2**31 - 1  # mallopt takes an int; this is 2 GiB of free top-of-heap

_applied = False


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc >= 2.33); all fields are byte or chunk counts."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library with ``mallopt``, ``mallinfo2`` and ``malloc_trim`` typed, or None."""
    if not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.mallopt.restype = ctypes.c_int
        libc.mallinfo2.argtypes = ()
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):  # not glibc after all, or glibc < 2.33
        return None
    return libc


def is_supported() -> bool:
    """True where the C library is glibc >= 2.33 on Linux (the only one this module tunes)."""
    return _libc() is not None


def reuse_freed_memory() -> bool:
    """Make glibc keep freed large blocks for reuse; True when the settings took effect.

    Idempotent and process-wide (it affects every later allocation, trm's or not). Returns
    False, changing nothing, where :func:`is_supported` is false or ``mallopt`` refuses.
    """
    global _applied
    libc = _libc()
    if _applied or libc is None:
        return _applied
    # mallopt returns 1 on success, 0 on error
    _applied = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_NEVER_BYTES)
    )
    return _applied


def idle_heap_bytes() -> int | None:
    """Free bytes glibc's heap holds for reuse now, or None where unsupported."""
    libc = _libc()
    return None if libc is None else int(libc.mallinfo2().fordblks)


def release_idle_memory() -> None:
    """Return the heap's free memory to the kernel (``malloc_trim(0)``); no-op elsewhere."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class IdleMemoryValve:
    """Bounds the free memory a reusing heap keeps: call :meth:`after_step` once per step.

    For the first ``learn_steps`` calls it records the largest idle heap (free bytes held
    between steps: what one step allocates and frees). After that, whenever the idle heap
    has grown by more than ``factor`` times that plus ``slack_bytes`` (:attr:`limit_bytes`)
    since the last release, it releases the idle memory to the kernel and returns the idle
    bytes it found; otherwise None. (Released free blocks stay counted as idle by glibc,
    hence growth since the last release.) Does nothing (returns None) unless
    :func:`reuse_freed_memory` is in effect.
    """

    def __init__(
        self, learn_steps: int = 3, factor: float = 2.0, slack_bytes: int = 256 * 2**20
    ) -> None:
        self.learn_steps = learn_steps
        self.factor = factor
        self.slack_bytes = slack_bytes
        self.calls = 0
        self.expected_idle_bytes = 0
        self.idle_at_release_bytes = 0

    @property
    def limit_bytes(self) -> int:
        """Growth of the idle heap since the last release above which memory is released."""
        return int(self.factor * self.expected_idle_bytes) + self.slack_bytes

    def after_step(self) -> int | None:
        if not _applied:
            return None
        idle = idle_heap_bytes()
        if idle is None:
            return None
        self.calls += 1
        if self.calls <= self.learn_steps:
            self.expected_idle_bytes = max(self.expected_idle_bytes, idle)
            return None
        if idle - self.idle_at_release_bytes <= self.limit_bytes:
            return None
        release_idle_memory()
        self.idle_at_release_bytes = idle
        return idle
