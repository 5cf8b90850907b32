"""CUDA backend: an NVIDIA GPU with bf16 autocast, TF32 and torch.compile.

On (``ACTIVATION = "auto"``) when PyTorch sees a CUDA GPU. It answers ``configure_runtime``
for ``runtime.device`` = auto, cuda or cuda:N before the CPU backend does. Under torchrun each
process takes the GPU of its ``LOCAL_RANK`` and touches no other: ``detect_hardware`` reads
every GPU's properties (no CUDA context) but the free memory of this process's GPU only,
after selecting it, so eight ranks make eight contexts, not sixty-four. The device contract
(:class:`CudaDevice`): pinned non-blocking copies, the caching allocator's peak and pressure
and its model for the estimate (:mod:`.cuda_allocator`), ``torch.OutOfMemoryError``, this
GPU's RNG, NCCL for collectives, Inductor through Triton (which needs a C compiler and the
Python headers besides the ``triton`` package).

CUDA graphs (``runtime.cuda_graphs``, :func:`choose_cuda_graphs`): where the network is
compiled, torch.compile's ``reduce-overhead`` mode records its kernels as CUDA graphs
(cudagraph trees) and replays them, one launch for many; each optimizer step is marked as a
new replay (``torch.compiler.cudagraph_mark_step_begin``). A capture that fails runs compiled
without graphs from there (:mod:`trm.loop.oom_retry`); a graph torch declines to capture runs
unreplayed, said once (:func:`on_step`). Not yet run on a GPU: the one prepared call is
``bash benchmarks/device_graphs.sh``.

Run on one NVIDIA H200 (``benchmarks/gpu.py``, the acceptance command; its figures are in
docs/performance.md, "GPU"); torchrun over several GPUs has not run on GPUs yet. Every line
here is also tested on the CPU with a fake ``torch.cuda`` (tests/test_backends.py,
tests/test_gpu_ready.py).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch
from attrs import frozen

from trm import hookimpl
from trm.device.compile import c_compiler, choose_compile, planner_decides, python_headers
from trm.device.contract import DeviceBackend
from trm.device.transfer import pinned_to_device
from trm.errors import TrmError
from trm.hardware import AcceleratorInfo, HardwareProfile
from trm.measure.flops import matmul_bound
from trm.memory import MemoryItem, StepMemory
from trm.plugins.backends import cuda_allocator
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

ACTIVATION = "auto"
UNAVAILABLE_REASON = "PyTorch sees no CUDA GPU here (torch.cuda.is_available() is False)"


def is_available() -> bool:
    """Whether PyTorch can use a CUDA GPU."""
    return torch.cuda.is_available()


@frozen
class CudaGpu:
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


def cuda_gpu(index: int) -> CudaGpu:
    """The facts of GPU ``index`` from ``torch.cuda.get_device_properties`` (which reads the
    driver's properties without creating a CUDA context on that GPU)."""
    props = torch.cuda.get_device_properties(index)
    return CudaGpu(
        index=index,
        name=str(props.name),
        memory_bytes=int(props.total_memory),
        capability=(int(props.major), int(props.minor)),
    )


def local_device_index() -> int:
    """The GPU this process uses: ``LOCAL_RANK`` under torchrun, else 0. TrmError when that
    GPU is not visible (more ranks than GPUs, or ``CUDA_VISIBLE_DEVICES`` set per process)."""
    text = os.environ.get("LOCAL_RANK", "0")
    index = int(text) if text.isdigit() else 0
    count = torch.cuda.device_count()
    if index >= count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise TrmError(
            f"LOCAL_RANK {index} needs GPU {index}, but this process sees {count} GPU(s)"
            f"{where}; start at most {count} processes per node (torchrun --nproc-per-node "
            f"{max(count, 1)}), or give every process all the node's GPUs"
        )
    return index


def choose_cuda_precision(setting: str, gpu: CudaGpu) -> tuple[str, list[str]]:
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


def enable_tf32(gpu: CudaGpu) -> bool:
    """Let float32 matmuls and convolutions use TF32 tensor cores where ``gpu`` has them.

    Uses the ``fp32_precision`` settings of torch >= 2.9 where they exist and the legacy
    ``allow_tf32`` flags only on older releases — never both, since mixing the two APIs is
    refused by Inductor."""
    if not gpu.tf32:
        return False
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
    else:  # torch < 2.9
        matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return True


def gpu_info(gpu: CudaGpu, free_bytes: int | None = None) -> AcceleratorInfo:
    """``gpu`` as the hardware profile records it (``free_bytes``: read only for this
    process's GPU); its generation is the compute capability, ``sm_80``."""
    major, minor = gpu.capability
    return AcceleratorInfo(
        kind=CudaDevice.name,
        index=gpu.index,
        name=gpu.name,
        generation=f"sm_{major}{minor}",
        count=1,
        memory_total_bytes=gpu.memory_bytes,
        memory_free_bytes=free_bytes,
        bf16=gpu.native_bf16,
        fp16=gpu.fast_fp16,
        tf32=gpu.tf32,
    )


def _free_bytes(index: int) -> int | None:
    try:
        return int(torch.cuda.mem_get_info(index)[0])
    except Exception:
        return None


class CudaDevice(DeviceBackend):
    """The device contract on an NVIDIA GPU (see the module docstring)."""

    name = "cuda"
    torch_type = "cuda"
    pins_host_batches = True

    def __init__(self) -> None:
        # whether the network was last compiled to replay CUDA graphs, and torch's count of
        # declined captures then (the notice is said once, when it grows)
        self.graphs = False
        self.skips_at_compile = 0
        self.skips_said = False

    def unavailable_reason(self) -> str | None:
        return None if is_available() else UNAVAILABLE_REASON

    def uses_device_memory(self) -> bool:
        return True

    def allocator_items(self, step: StepMemory) -> list[MemoryItem]:
        """The context, cuBLAS, the caching allocator and NCCL (:mod:`.cuda_allocator`)."""
        return cuda_allocator.allocator_items(step)

    def process_group_backends(self) -> dict[str, str]:
        import torch.distributed as dist

        nccl = dist.is_available() and dist.is_nccl_available()
        return {self.torch_type: "nccl"} if nccl else {}

    def prepare_process_group(self) -> None:
        """NCCL's watchdog aborts the whole process when a collective times out, before
        trm can write its summary; with error handling 2 ("clean up only") it tears down
        the communicators and the waiting collective raises, so the run ends as trm's
        one-line failure, exit 1, with its last good checkpoint. A user's own setting wins."""
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")

    def gpus(self, hardware: HardwareProfile) -> list[AcceleratorInfo]:
        """The GPUs of ``hardware``: its accelerators of this backend's kind."""
        return [a for a in hardware.accelerators or () if a.kind == self.name]

    def machine_devices(self, hardware: HardwareProfile) -> list[str]:
        return [f"{self.torch_type}:{gpu.index}" for gpu in self.gpus(hardware)]

    def budget_bytes(self, hardware: HardwareProfile, device: torch.device) -> int | None:
        """The memory of GPU ``device.index`` (0 when none is given); of the first GPU whose
        memory is known when the profile does not list that one."""
        index = device.index or 0
        known = [gpu for gpu in self.gpus(hardware) if gpu.memory_total_bytes]
        mine = [gpu for gpu in known if gpu.index == index] or known
        return mine[0].memory_total_bytes if mine else None

    def compile_unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("triton") is None:
            return "Triton is not installed (pip install triton)"
        if c_compiler() is None:
            return "Triton needs a C compiler to build its launcher (install gcc, or set CC)"
        if python_headers() is None:
            return "Triton needs the Python headers (Python.h; install python3-dev)"
        return None

    def to_device(self, batch, device):
        return pinned_to_device(batch, device)

    def begin_step(self, device: torch.device) -> None:
        torch.cuda.reset_peak_memory_stats(device)
        if self.graphs:  # a new step: the graphs' outputs of the last one may be reused
            torch.compiler.cudagraph_mark_step_begin()

    def compile(self, net: torch.nn.Module, graphs: bool = False) -> None:
        """Compile ``net``; with ``graphs``, in ``reduce-overhead`` mode (CUDA graphs)."""
        self.graphs = graphs
        self.skips_at_compile, self.skips_said = cudagraph_skips(), False
        if graphs:
            net.compile(mode="reduce-overhead")
        else:
            net.compile()

    def step_peak_mb(self, device: torch.device) -> float | None:
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)

    def is_out_of_memory(self, error: BaseException) -> bool:
        text = str(error).lower()
        return isinstance(error, RuntimeError) and "cuda out of memory" in text

    def memory_kind(self, error: BaseException) -> str:
        return "CUDA device"

    def free_cached_memory(self, device: torch.device) -> None:
        super().free_cached_memory(device)
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()

    def used_fraction(self, device: torch.device) -> float | None:
        total = torch.cuda.get_device_properties(device).total_memory
        return torch.cuda.max_memory_reserved(device) / total if total else None

    def rng_state(self, device: torch.device) -> torch.Tensor | None:
        return torch.cuda.get_rng_state(device)

    def set_rng_state(self, state: torch.Tensor, device: torch.device) -> None:
        torch.cuda.set_rng_state(state, device)

    def describe(self) -> str:
        return "cuda (NVIDIA GPUs; cuda:N picks one)"


CUDA = CudaDevice()


def cudagraph_skips() -> int:
    """torch's count of compiled graphs it ran without capturing them as CUDA graphs."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def choose_cuda_graphs(setting: str, can_compile: bool) -> tuple[bool, str | None]:
    """``runtime.cuda_graphs`` (auto, on, off) where the network can be compiled or not:
    (replay graphs?, notice). CUDA graphs replay compiled kernels, so they need the network
    compiled: ``on`` without it is a TrmError; ``auto`` is on wherever it compiles."""
    if setting == "off":
        return False, None
    if not can_compile:
        if setting == "on":
            raise TrmError(
                "runtime.cuda_graphs = 'on' needs the network compiled, and it is not "
                "(runtime.compile, or torch.compile cannot run here); set runtime.cuda_graphs "
                "= 'auto' or 'off'"
            )
        return False, None
    return True, (
        "CUDA graphs: the compiled network's kernels are replayed as graphs "
        "(runtime.cuda_graphs = 'off' launches them one by one)"
    )


@hookimpl
def on_step(state: Any, metrics: dict[str, float], control: Any) -> None:
    """Say once when torch declined to capture part of the compiled step as CUDA graphs
    (that part runs compiled, launched kernel by kernel)."""
    if not CUDA.graphs or CUDA.skips_said:
        return
    skipped = cudagraph_skips() - CUDA.skips_at_compile
    if skipped > 0:
        CUDA.skips_said = True
        control.log(
            f"CUDA graphs: torch declined to capture {skipped} compiled graph(s) of the step, "
            "which run without graph replay (TORCH_LOGS=perf_hints says why)"
        )


@hookimpl
def device_backends() -> list[DeviceBackend]:
    return [CUDA]


@hookimpl
def detect_hardware() -> HardwareProfile | None:
    """Every visible GPU as an ``accelerators`` record: name, memory, compute capability,
    bf16/fp16/TF32 support; the free memory of this process's GPU only (selected first, so no
    other GPU gets a context)."""
    if not is_available():
        return None
    local = local_device_index()
    torch.cuda.set_device(local)
    gpus = [cuda_gpu(i) for i in range(torch.cuda.device_count())]
    return HardwareProfile(
        accelerators=tuple(
            gpu_info(g, _free_bytes(g.index) if g.index == local else None) for g in gpus
        )
    )


@hookimpl
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Answer for ``auto`` and ``cuda`` when a GPU is visible: bf16 where native, TF32,
    torch.compile where Triton can build; host threads from the CPU's usable cores.
    ``cuda:N`` picks GPU N (one process); under torchrun ``LOCAL_RANK`` picks it."""
    runtime = spec.runtime
    if runtime.device != "auto" and not CUDA.claims(runtime.device):
        return None
    if not is_available():
        return None
    index = local_device_index()
    if ":" in runtime.device and "LOCAL_RANK" not in os.environ:
        index = int(runtime.device.split(":")[1])
        if index >= torch.cuda.device_count():
            raise TrmError(
                f"runtime.device: {runtime.device!r} but this process sees "
                f"{torch.cuda.device_count()} GPU(s)"
            )
    gpu = cuda_gpu(index)
    torch.cuda.set_device(gpu.index)
    precision, notes = choose_cuda_precision(runtime.precision, gpu)
    if enable_tf32(gpu):
        notes.append("TF32 tensor cores on for float32 matmuls")
    large = matmul_bound(spec.arch)
    compile_on, compile_note = choose_compile(runtime.compile, CUDA, large)
    if compile_note:
        notes.append(compile_note)
    by_planner = planner_decides(runtime.compile, CUDA, large)
    graphs, graphs_note = choose_cuda_graphs(runtime.cuda_graphs, compile_on or by_planner)
    if graphs_note:
        notes.append(graphs_note)
    threads = runtime.threads or max(1, hardware.physical_cores or 1)
    torch.set_num_threads(threads)
    notes.insert(0, f"GPU {gpu.index}: {gpu.describe()}")
    return RuntimeChoice(
        device=f"cuda:{gpu.index}",
        precision=precision,
        threads=threads,
        compile=compile_on,
        compile_by_planner=by_planner,
        graphs=graphs,
        notes=tuple(notes),
        backend=CUDA,
    )
