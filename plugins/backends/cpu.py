"""CPU backend: threads from the physical cores other processes leave free (followed during
the run), bf16 autocast where native, torch.compile, and freed host memory kept for reuse.
Its device is the host: the contract's defaults (:class:`trm.device.contract.DeviceBackend`)
with the C++ toolchain check for torch.compile."""

from __future__ import annotations

import sys
import time

import torch

from trm import hookimpl
from trm.control import TrainControl
from trm.device.compile import choose_compile, cpp_compiler, planner_decides
from trm.device.contract import DeviceBackend
from trm.device.host_memory import IdleMemoryValve
from trm.device.host_memory import is_supported as host_memory_reuse_supported
from trm.errors import TrmError
from trm.hardware import HardwareProfile, allowed_cpu_count
from trm.measure.flops import matmul_bound
from trm.plugins.backends.cpu_contention import CpuTimes, ThreadWatch, fit_threads, measure_start
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

    def position_major_mlp(self, compiled: bool) -> bool:
        """Eager, position-major; compiled, token-major: the compiled token-major step was
        1.16x (batch 32) and 1.18x (batch 128) faster than the compiled position-major one on
        a 2-core Zen 3, where the eager layouts are within 5% of each other
        (benchmarks/results/layout-speed-quickstart-{compiled,eager}-epyc-zen3.json). Other
        CPUs are not measured."""
        return not compiled


CPU = CpuDevice()


def _usable_cores(hardware: HardwareProfile) -> int:
    """Physical cores (logical where unknown), no more than the CPUs this process may use."""
    cores = hardware.physical_cores or hardware.logical_cores or 1
    return max(1, min(cores, allowed_cpu_count()))


def choose_cpu_precision(setting: str, native_bf16: bool | None) -> tuple[str, list[str]]:
    """``runtime.precision`` on a CPU: (precision, notices).

    ``auto`` is bf16 autocast where the CPU multiplies bf16 natively (AVX-512 BF16, AMX), at
    every network width, else fp32: small networks gain too, as their step is memory traffic
    over large activations that bf16 halves (benchmarks/results/small-net-speed-epyc-zen5.json).
    fp16 becomes bf16 (CPUs have no fast fp16 products); explicit bf16 on a CPU without native
    bf16 is kept, with a warning that it is emulated.
    """
    notes: list[str] = []
    if setting == "auto":
        return ("bf16" if native_bf16 else "fp32"), notes
    if setting == "fp16":
        notes.append("fp16 is slow on CPUs; using bf16 autocast instead")
        setting = "bf16"
    if setting == "bf16" and not native_bf16:
        notes.append(
            "this CPU has no native bf16; bf16 autocast will be emulated, around 100x slower "
            "than fp32 (use runtime.precision = 'auto' or 'fp32')"
        )
    return setting, notes


def choose_threads(
    setting: int, usable_cores: int, start: tuple[CpuTimes, float] | None
) -> tuple[int, list[str]]:
    """``runtime.threads`` on a CPU: (threads, notices). An explicit setting is kept. For 0,
    ``usable_cores`` less the CPUs other processes held at the start (``start``: the reading
    and those CPUs, :func:`~trm.plugins.backends.cpu_contention.measure_start`; None: not
    measured, all usable cores), at least one."""
    if setting or start is None:
        return setting or usable_cores, []
    reading, others = start
    threads = fit_threads(usable_cores, reading.cpus, others)
    if threads == usable_cores:
        return threads, []
    return threads, [
        f"{threads} thread{'s' if threads != 1 else ''}, not {usable_cores}: other processes "
        f"held {others:.1f} of the {reading.cpus} CPUs at the start; the count follows them "
        "during the run (runtime.threads fixes it)"
    ]


def configure_cpu(
    spec: RunSpec, hardware: HardwareProfile, start: tuple[CpuTimes, float] | None = None
) -> RuntimeChoice | None:
    """The CPU answers for ``auto`` (when no accelerator plugin did) and ``cpu``.

    Threads: :func:`choose_threads` (``start`` is the machine's reading). Precision: see
    :func:`choose_cpu_precision`. Compilation: :func:`trm.device.compile.choose_compile`, whose
    ``auto`` depends on :func:`trm.measure.flops.matmul_bound`. Host memory: freed blocks are
    kept for reuse where :mod:`trm.device.host_memory` can tune the C library (glibc on Linux),
    unless ``runtime.host_memory`` is ``system``.
    """
    runtime = spec.runtime
    if runtime.device != "auto" and not CPU.claims(runtime.device):
        return None
    logical = allowed_cpu_count()
    if runtime.threads > logical:
        raise TrmError(
            f"runtime.threads: {runtime.threads} is more than the {logical} logical CPUs this "
            f"process may use; set 0 (one per physical core) or at most {logical}"
        )
    threads, notes = choose_threads(runtime.threads, _usable_cores(hardware), start)
    torch.set_num_threads(threads)
    large = matmul_bound(spec.arch)
    precision, precision_notes = choose_cpu_precision(runtime.precision, hardware.cpu_native_bf16)
    notes += precision_notes
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
        compile_by_planner=planner_decides(runtime.compile, CPU, large),
        notes=tuple(notes),
        reuse_host_memory=reuse,
        backend=CPU,
    )


# A start reading younger than this serves the second configure_runtime of a plan.
START_READING_REUSE_S = 30.0


class CpuBackend:
    """CPU backend: threads from the physical cores other processes leave free, followed
    during the run (unless ``runtime.threads`` fixes them), bf16 autocast where native,
    torch.compile, and freed host memory kept for reuse (bounded per run by an idle-memory
    valve)."""

    ACTIVATION = "default"

    def __init__(self) -> None:
        # Bounds the idle memory a reusing heap keeps (trm.device.host_memory) for this run.
        self.valve = IdleMemoryValve()
        # The machine's reading at the start and the watch that follows it (threads 0 only).
        self.start: tuple[CpuTimes, float] | None = None
        self.start_monotonic_s = 0.0
        self.watch: ThreadWatch | None = None

    @hookimpl
    def device_backends(self) -> list[DeviceBackend]:
        return [CPU]

    @hookimpl(trylast=True)
    def configure_runtime(self, spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
        """:func:`configure_cpu` with the machine read at the start (once per plan); with
        ``runtime.threads`` 0, a :class:`ThreadWatch` then follows the machine in ``on_step``."""
        runtime = spec.runtime
        if runtime.device != "auto" and not CPU.claims(runtime.device):
            return None
        if runtime.threads == 0 and not self._fresh_start():
            self.start, self.start_monotonic_s = measure_start(), time.monotonic()
        choice = configure_cpu(spec, hardware, self.start if runtime.threads == 0 else None)
        self.watch = None
        if choice is not None and runtime.threads == 0 and self.start is not None:
            self.watch = ThreadWatch(_usable_cores(hardware), choice.threads, self.start[0])
        return choice

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        """On a resumed run whose threads follow the machine, go on with the count its
        checkpoint was written under (at most the usable cores); the watch follows the
        machine from there. With the same count at every step, a resumed run ends
        bit-identical to an uninterrupted one (docs/resilience.md)."""
        recorded = state.checkpoint_threads
        if self.watch is None or recorded is None:
            return
        count = min(recorded, self.watch.usable_cores)
        self.watch.threads = count
        if count != torch.get_num_threads():
            control.set_threads(count, f"the count checkpoint step {state.step} was written under")

    def _fresh_start(self) -> bool:
        if self.start is None:
            return False
        return time.monotonic() - self.start_monotonic_s < START_READING_REUSE_S

    @hookimpl
    def on_step(self, state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
        """After each step, release idle heap memory that grows past the valve's bound, and
        ask for the thread count the machine now allows when it changed."""
        if self.watch is not None:
            change = self.watch.after_step()
            if change is not None:
                control.set_threads(*change)
        released = self.valve.after_step()
        if released is not None:
            control.log(
                f"cpu: returned {released / 2**20:.0f} MiB of idle heap memory to the system "
                f"(more than {self.valve.limit_bytes / 2**20:.0f} MiB had built up since the "
                "last time)"
            )
