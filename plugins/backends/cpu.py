"""CPU backend: threads from physical cores, bf16 autocast where native, torch.compile, and
freed host memory kept for reuse. Its device is the host: the contract's defaults
(:class:`trm.device.contract.DeviceBackend`) with the C++ toolchain check for torch.compile."""

from __future__ import annotations

import os
import sys

import torch

from trm import hookimpl
from trm.control import TrainControl
from trm.device.compile import choose_compile, cpp_compiler
from trm.device.contract import DeviceBackend
from trm.device.host_memory import IdleMemoryValve
from trm.device.host_memory import is_supported as host_memory_reuse_supported
from trm.errors import TrmError
from trm.hardware import HardwareProfile
from trm.measure.flops import matmul_bound
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState


class CpuDevice(DeviceBackend):
    """The host as a training device: tensors in host memory, torch's CPU generator, gloo for
    collectives; torch.compile through Inductor's C++ code, which needs a C++ compiler."""

    name = "cpu"
    torch_type = "cpu"

    def compile_unavailable_reason(self) -> str | None:
        if sys.platform == "win32":
            return "torch.compile on Windows CPUs needs MSVC set up; not attempted"
        if cpp_compiler() is None:
            return "no C++ compiler found (install g++ or clang++, or set CXX)"
        return None

    def describe(self) -> str:
        return "cpu (the host)"


CPU = CpuDevice()


def _usable_cores(hardware: HardwareProfile) -> int:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = hardware.physical_cores or hardware.logical_cores or 1
    return max(1, min(cores, affinity or cores))


def choose_cpu_precision(
    setting: str, native_bf16: bool | None, large_network: bool = True
) -> tuple[str, list[str]]:
    """``runtime.precision`` on a CPU: (precision, notices).

    ``auto`` is bf16 autocast where the CPU multiplies bf16 natively (AVX-512 BF16, AMX) and
    the network is large enough for its products to set the step time, else fp32. fp16
    becomes bf16 (CPUs have no fast fp16 products); explicit bf16 on a CPU without native
    bf16 is kept, with a warning that it is emulated.
    """
    notes: list[str] = []
    if setting == "auto":
        return ("bf16" if native_bf16 and large_network else "fp32"), notes
    if setting == "fp16":
        notes.append("fp16 is slow on CPUs; using bf16 autocast instead")
        setting = "bf16"
    if setting == "bf16" and not native_bf16:
        notes.append(
            "this CPU has no native bf16; bf16 autocast will be emulated, around 100x slower "
            "than fp32 (use runtime.precision = 'auto' or 'fp32')"
        )
    return setting, notes


def configure_cpu(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """The CPU answers for ``auto`` (when no accelerator plugin did) and ``cpu``.

    Threads: ``runtime.threads`` or the physical cores this process may use. Precision: see
    :func:`choose_cpu_precision`. Compilation: :func:`trm.device.compile.choose_compile`. Both
    ``auto`` choices depend on :func:`trm.measure.flops.matmul_bound`. Host memory: freed blocks are
    kept for reuse where :mod:`trm.device.host_memory` can tune the C library (glibc on Linux),
    unless ``runtime.host_memory`` is ``system``.
    """
    runtime = spec.runtime
    if runtime.device != "auto" and not CPU.claims(runtime.device):
        return None
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if logical and runtime.threads > logical:
        raise TrmError(
            f"runtime.threads: {runtime.threads} is more than the {logical} logical CPUs this "
            f"process may use; set 0 (one per physical core) or at most {logical}"
        )
    threads = runtime.threads or _usable_cores(hardware)
    torch.set_num_threads(threads)
    large = matmul_bound(spec.arch)
    precision, notes = choose_cpu_precision(runtime.precision, hardware.cpu_native_bf16, large)
    compile_on, compile_note = choose_compile(runtime.compile, CPU, large)
    if compile_note:
        notes.append(compile_note)
    reuse = runtime.host_memory != "system" and host_memory_reuse_supported()
    if runtime.host_memory == "reuse" and not reuse:
        notes.append(
            "runtime.host_memory = 'reuse' needs glibc on Linux; using the C library's defaults"
        )
    return RuntimeChoice(
        device="cpu",
        precision=precision,
        threads=threads,
        compile=compile_on,
        notes=tuple(notes),
        reuse_host_memory=reuse,
        backend=CPU,
    )


class CpuBackend:
    """CPU backend: threads from physical cores, bf16 autocast where native, torch.compile,
    and freed host memory kept for reuse (bounded per run by an idle-memory valve)."""

    ACTIVATION = "default"

    def __init__(self) -> None:
        # Bounds the idle memory a reusing heap keeps (trm.device.host_memory) for this run.
        self.valve = IdleMemoryValve()

    @hookimpl
    def device_backends(self) -> list[DeviceBackend]:
        return [CPU]

    @hookimpl(trylast=True)
    def configure_runtime(self, spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
        return configure_cpu(spec, hardware)

    @hookimpl
    def on_step(self, state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
        """After each step, release idle heap memory that grows past the valve's bound."""
        released = self.valve.after_step()
        if released is not None:
            control.log(
                f"cpu: returned {released / 2**20:.0f} MiB of idle heap memory to the system "
                f"(more than {self.valve.limit_bytes / 2**20:.0f} MiB had built up since the "
                "last time)"
            )
