"""CUDA backend: an NVIDIA GPU with bf16 autocast, TF32 and torch.compile.

On (``ACTIVATION = "auto"``) when PyTorch sees a CUDA GPU. It answers ``configure_runtime``
for ``runtime.device`` = auto or cuda before the CPU backend does. Under torchrun each
process takes the GPU of its ``LOCAL_RANK``. Device memory statistics belong to the core
(:mod:`trm.device.memory`), which resets the peak counter at each step.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from attrs import frozen

from trm import hookimpl
from trm.device.compile import choose_compile
from trm.hardware import HardwareProfile
from trm.measure.flops import matmul_bound
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

ACTIVATION = "auto"
UNAVAILABLE_REASON = "PyTorch sees no CUDA GPU here (torch.cuda.is_available() is False)"


def is_available() -> bool:
    """Whether PyTorch can use a CUDA GPU."""
    return torch.cuda.is_available()


@frozen
class CudaDevice:
    """What one GPU can do: the facts precision choices depend on."""

    index: int
    name: str
    memory_bytes: int
    capability: tuple[int, int]

    @property
    def native_bf16(self) -> bool:
        """bf16 tensor cores: Ampere (8.0) and newer."""
        return self.capability >= (8, 0)

    @property
    def fast_fp16(self) -> bool:
        """fp16 tensor cores: Volta (7.0) and newer."""
        return self.capability >= (7, 0)

    @property
    def tf32(self) -> bool:
        """TF32 tensor-core matmuls for float32: Ampere (8.0) and newer."""
        return self.capability >= (8, 0)

    def describe(self) -> str:
        major, minor = self.capability
        gib = self.memory_bytes / 2**30
        kinds = [k for k, ok in (("bf16", self.native_bf16), ("TF32", self.tf32)) if ok]
        extra = f", {'/'.join(kinds)}" if kinds else ""
        return f"{self.name} ({gib:.0f} GiB, sm_{major}{minor}{extra})"


def cuda_device(index: int) -> CudaDevice:
    """The facts of GPU ``index`` from ``torch.cuda.get_device_properties``."""
    props = torch.cuda.get_device_properties(index)
    return CudaDevice(
        index=index,
        name=str(props.name),
        memory_bytes=int(props.total_memory),
        capability=(int(props.major), int(props.minor)),
    )


def local_device_index() -> int:
    """The GPU this process uses: ``LOCAL_RANK`` under torchrun, else 0."""
    text = os.environ.get("LOCAL_RANK", "0")
    return int(text) if text.isdigit() else 0


def choose_cuda_precision(setting: str, gpu: CudaDevice) -> tuple[str, list[str]]:
    """``runtime.precision`` on ``gpu``: (precision, notices).

    ``auto`` is bf16 autocast on bf16 tensor cores (Ampere and newer), else fp32: fp16
    autocast would need loss scaling, which the loop does not do, so fp16 is used only when
    asked for, with a warning.
    """
    notes: list[str] = []
    if setting == "auto":
        if gpu.native_bf16:
            return "bf16", notes
        notes.append(
            f"{gpu.name} has no bf16 tensor cores; training in fp32 "
            "(runtime.precision = 'fp16' is faster but unscaled fp16 gradients may underflow)"
        )
        return "fp32", notes
    if setting == "bf16" and not gpu.native_bf16:
        notes.append(f"{gpu.name} has no native bf16; bf16 autocast will be emulated and slow")
    if setting == "fp16":
        notes.append("fp16 autocast without loss scaling: watch for a loss that stops moving")
    return setting, notes


def enable_tf32(gpu: CudaDevice) -> bool:
    """Let float32 matmuls and convolutions use TF32 tensor cores where ``gpu`` has them."""
    if not gpu.tf32:
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True


def gpu_info(gpu: CudaDevice) -> Any:
    """``gpu`` as the hardware profile records it, a ``trm.hardware.GpuInfo``."""
    from trm.hardware import GpuInfo

    free: int | None = None
    try:
        free = int(torch.cuda.mem_get_info(gpu.index)[0])
    except Exception:
        free = None
    major, minor = gpu.capability
    return GpuInfo(
        index=gpu.index,
        name=gpu.name,
        memory_total_bytes=gpu.memory_bytes,
        memory_free_bytes=free,
        compute_capability=f"{major}.{minor}",
        bf16=gpu.native_bf16,
        fp16=gpu.fast_fp16,
        tf32=gpu.tf32,
    )


@hookimpl
def detect_hardware() -> HardwareProfile | None:
    """Every visible GPU: name, memory, compute capability, bf16/fp16/TF32 support."""
    if not is_available():
        return None
    gpus = [cuda_device(i) for i in range(torch.cuda.device_count())]
    return HardwareProfile(
        cuda_devices=tuple(g.describe() for g in gpus),
        cuda_memory_bytes=gpus[0].memory_bytes if gpus else None,
        gpus=tuple(gpu_info(g) for g in gpus),
    )


@hookimpl
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Answer for ``auto`` and ``cuda`` when a GPU is visible: bf16 where native, TF32,
    torch.compile where Triton is installed; host threads from the CPU's usable cores."""
    runtime = spec.runtime
    if runtime.device not in ("auto", "cuda") or not is_available():
        return None
    gpu = cuda_device(local_device_index())
    torch.cuda.set_device(gpu.index)
    precision, notes = choose_cuda_precision(runtime.precision, gpu)
    if enable_tf32(gpu):
        notes.append("TF32 tensor cores on for float32 matmuls")
    large = matmul_bound(spec.arch)
    compile_on, compile_note = choose_compile(runtime.compile, "cuda", large)
    if compile_note:
        notes.append(compile_note)
    threads = runtime.threads or max(1, hardware.physical_cores or 1)
    torch.set_num_threads(threads)
    notes.insert(0, f"GPU {gpu.index}: {gpu.describe()}")
    return RuntimeChoice(
        device=f"cuda:{gpu.index}",
        precision=precision,
        threads=threads,
        compile=compile_on,
        notes=tuple(notes),
    )
