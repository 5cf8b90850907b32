"""CPU backend: threads from physical cores, bf16 autocast where native, torch.compile."""

from __future__ import annotations

import os

import torch

from trm import hookimpl
from trm.compile import choose_compile
from trm.flops import matmul_bound
from trm.hardware import HardwareProfile
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

ACTIVATION = "default"


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


@hookimpl(trylast=True)
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """The CPU answers for ``auto`` (when no accelerator plugin did) and ``cpu``.

    Threads: ``runtime.threads`` or the physical cores this process may use. Precision: see
    :func:`choose_cpu_precision`. Compilation: :func:`trm.compile.choose_compile`. Both
    ``auto`` choices depend on :func:`trm.flops.matmul_bound`.
    """
    runtime = spec.runtime
    if runtime.device not in ("auto", "cpu"):
        return None
    threads = runtime.threads or _usable_cores(hardware)
    torch.set_num_threads(threads)
    large = matmul_bound(spec.arch)
    precision, notes = choose_cpu_precision(runtime.precision, hardware.cpu_native_bf16, large)
    compile_on, compile_note = choose_compile(runtime.compile, "cpu", large)
    if compile_note:
        notes.append(compile_note)
    return RuntimeChoice(
        device="cpu", precision=precision, threads=threads, compile=compile_on, notes=tuple(notes)
    )
