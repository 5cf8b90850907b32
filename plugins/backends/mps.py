"""MPS backend: the Apple GPU, with the dtypes it supports and the CPU fallback for missing ops.

On (``ACTIVATION = "auto"``) when PyTorch can use Metal. It answers ``configure_runtime``
for ``runtime.device`` = auto or mps before the CPU backend. MPS has no float64 (the loss
computes stable-max in float32 there) and some operators run only on the CPU: the fallback
``PYTORCH_ENABLE_MPS_FALLBACK=1`` is read when torch loads, so the plugin re-launches
``trm`` with it set (see :mod:`trm.plugins.backends.launch_env`).
"""

from __future__ import annotations

import torch

from trm import hookimpl
from trm.device.compile import choose_compile
from trm.device.contract import DeviceBackend
from trm.hardware import AcceleratorInfo, HardwareProfile
from trm.measure.flops import matmul_bound
from trm.plugins.backends.launch_env import ensure_env
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

    ``auto`` is fp32: Apple GPUs have no bf16 matrix units that autocast would use (the tiers
    say the same, plugins/planning/tiers.py ``native_bf16``), and bf16 on MPS is not measured faster
    here (no Mac has run it). bf16 is used when asked for and macOS supports it (14+), else
    fp32; fp16 only when asked for (no loss scaling in the loop).
    """
    notes: list[str] = []
    if setting == "auto":
        return "fp32", notes
    if setting == "bf16" and not bf16_ok:
        notes.append("bf16 on MPS needs macOS 14 or newer; training in fp32")
        return "fp32", notes
    if setting == "fp16":
        notes.append("fp16 autocast without loss scaling: watch for a loss that stops moving")
    return setting, notes


class MpsDevice(DeviceBackend):
    """The device contract on the Apple GPU: unified memory (the host's budget is its budget),
    MPS's allocator, its own generator, no torch.compile (experimental on MPS).

    MPS keeps no peak counter: :meth:`step_peak_mb` is the driver's allocation at the step's
    end, which holds the blocks the step freed into MPS's cache, so it bounds the step's peak
    allocation from above, as closely as MPS lets anyone measure."""

    name = "mps"
    torch_type = "mps"

    def unavailable_reason(self) -> str | None:
        return None if is_available() else UNAVAILABLE_REASON

    def uses_device_memory(self) -> bool:
        return True

    def machine_devices(self, hardware: HardwareProfile) -> list[str]:
        mine = any(a.kind == self.name for a in hardware.accelerators or ())
        return [self.torch_type] if mine else []

    def budget_bytes(self, hardware: HardwareProfile, device: torch.device) -> int | None:
        return hardware.memory_budget_bytes

    def shares_host_memory(self, hardware: HardwareProfile, device: torch.device) -> bool:
        return bool(hardware.unified_memory)

    def compile_unavailable_reason(self) -> str | None:
        return "torch.compile on MPS is experimental"

    def step_peak_mb(self, device: torch.device) -> float | None:
        return round(torch.mps.driver_allocated_memory() / 2**20, 1)

    def synchronize(self, device: torch.device) -> None:
        torch.mps.synchronize()

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, RuntimeError) and "mps backend out of memory" in str(error).lower()

    def memory_kind(self, error: BaseException) -> str:
        return "MPS device"

    def free_cached_memory(self, device: torch.device) -> None:
        super().free_cached_memory(device)
        torch.mps.empty_cache()

    def used_fraction(self, device: torch.device) -> float | None:
        limit = torch.mps.recommended_max_memory()
        return torch.mps.driver_allocated_memory() / limit if limit else None

    def rng_state(self, device: torch.device) -> torch.Tensor | None:
        return torch.mps.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: torch.device) -> None:
        torch.mps.set_rng_state(state)

    def describe(self) -> str:
        return "mps (the Apple GPU)"


MPS = MpsDevice()


@hookimpl
def device_backends() -> list[DeviceBackend]:
    return [MPS]


@hookimpl
def detect_hardware() -> HardwareProfile | None:
    """The Apple GPU as an ``accelerators`` record when Metal can use it."""
    if not is_available():
        return None
    return HardwareProfile(accelerators=(AcceleratorInfo(kind=MPS.name, name="Apple GPU"),))


@hookimpl
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Answer for ``auto`` and ``mps`` when the Apple GPU is usable."""
    runtime = spec.runtime
    if runtime.device != "auto" and not MPS.claims(runtime.device):
        return None
    if not is_available():
        return None
    notes = ensure_env(FALLBACK_ENV, "mps", "operators MPS lacks run on the CPU")
    precision, precision_notes = choose_mps_precision(runtime.precision, mps_supports_bf16())
    notes.extend(precision_notes)
    compile_on, compile_note = choose_compile(runtime.compile, MPS, matmul_bound(spec.arch))
    if compile_note:
        notes.append(compile_note)
    threads = runtime.threads or max(1, hardware.physical_cores or 1)
    torch.set_num_threads(threads)
    return RuntimeChoice(
        device="mps",
        precision=precision,
        threads=threads,
        compile=compile_on,
        notes=tuple(notes),
        backend=MPS,
    )
