"""MPS backend: the Apple GPU, with the dtypes it supports and the CPU fallback for missing ops.

On (``ACTIVATION = "auto"``) when PyTorch can use Metal. It answers ``configure_runtime``
for ``runtime.device`` = auto or mps before the CPU backend. MPS has no float64 (the loss
computes stable-max in float32 there) and some operators run only on the CPU: the fallback
``PYTORCH_ENABLE_MPS_FALLBACK=1`` is read when torch loads, so the plugin re-launches
``trm`` with it set (see :mod:`trm.plugins.launch_env`).
"""

from __future__ import annotations

import torch

from trm import hookimpl
from trm.device.compile import choose_compile
from trm.hardware import HardwareProfile
from trm.measure.flops import matmul_bound
from trm.plugins.launch_env import ensure_env
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

ACTIVATION = "auto"
UNAVAILABLE_REASON = "PyTorch cannot use an Apple GPU here (torch.backends.mps.is_available())"
FALLBACK_ENV = {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}


def is_available() -> bool:
    """Whether PyTorch can use the Apple GPU (Metal Performance Shaders)."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def mps_supports_bf16() -> bool:
    """bf16 on MPS needs macOS 14 or newer."""
    check = getattr(torch.backends.mps, "is_macos_or_newer", None)
    try:
        return bool(check is not None and check(14, 0))
    except Exception:
        return False


def choose_mps_precision(setting: str, bf16_ok: bool) -> tuple[str, list[str]]:
    """``runtime.precision`` on MPS: (precision, notices).

    ``auto`` is bf16 autocast where macOS supports it, else fp32; fp16 only when asked for
    (no loss scaling in the loop); bf16 asked for where unsupported falls back to fp32.
    """
    notes: list[str] = []
    if setting == "auto":
        return ("bf16" if bf16_ok else "fp32"), notes
    if setting == "bf16" and not bf16_ok:
        notes.append("bf16 on MPS needs macOS 14 or newer; training in fp32")
        return "fp32", notes
    if setting == "fp16":
        notes.append("fp16 autocast without loss scaling: watch for a loss that stops moving")
    return setting, notes


@hookimpl
def detect_hardware() -> HardwareProfile:
    return HardwareProfile(mps_available=is_available())


@hookimpl
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Answer for ``auto`` and ``mps`` when the Apple GPU is usable."""
    runtime = spec.runtime
    if runtime.device not in ("auto", "mps") or not is_available():
        return None
    notes = ensure_env(FALLBACK_ENV, "mps", "operators MPS lacks run on the CPU")
    precision, precision_notes = choose_mps_precision(runtime.precision, mps_supports_bf16())
    notes.extend(precision_notes)
    compile_on, compile_note = choose_compile(runtime.compile, "mps", matmul_bound(spec.arch))
    if compile_note:
        notes.append(compile_note)
    threads = runtime.threads or max(1, hardware.physical_cores or 1)
    torch.set_num_threads(threads)
    return RuntimeChoice(
        device="mps", precision=precision, threads=threads, compile=compile_on, notes=tuple(notes)
    )
