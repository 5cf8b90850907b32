"""XLA backend: Cloud TPUs (and the CPU, for testing) through PyTorch/XLA.

On (``ACTIVATION = "auto"``) when ``torch_xla`` is installed. It answers
``configure_runtime`` for ``runtime.device = "xla"``, and for ``auto`` when ``PJRT_DEVICE``
is set (``TPU``, or ``CPU`` to run XLA on the host), before the CPU backend does. Importing
``torch_xla`` takes long and starts nothing useful elsewhere, so it is imported only when a
run is on this backend: ``trm plugins`` and every other backend's run never import it.

One process drives every local device. With more than one (the 4 chips of a v4-8 host, or
``CPU_NUM_DEVICES=2``), the backend turns on PyTorch/XLA's SPMD mode, builds a 1-D mesh over
the devices and shards every batch (and so the carry, made from the batch) along its first
dimension; the weights, optimizer moments, EMA and puzzle-embedding table stay replicated, and
XLA's SPMD partitioner inserts the reductions the update needs, so the update equals one
device's. The global batch (and a micro-batch) must divide by the device count.

The device contract (:class:`XlaBackend`): ``to_device`` copies and shards; autocast is
``torch.autocast("xla", bfloat16)`` (bf16 by default only on a TPU, whose matrix units are
bf16; on the CPU as asked, else fp32); ``mark_step`` is ``torch_xla.sync()``, which cuts the
step's lazy graph and runs it; memory figures come from the runtime (a TPU's HBM; the CPU
runtime says nothing, so they are None there); out of memory is XLA's ``RESOURCE_EXHAUSTED``;
the RNG state is the device seed, seeded with the run (``seed``); there is no torch.compile
(XLA compiles each traced step whole, once per distinct graph); checkpoints are written from
host copies. Multi-host pod slices are not supported (see docs/tpu.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from attrs import frozen

from trm import hookimpl
from trm.device.contract import DeviceBackend, host_tensors
from trm.errors import TrmError
from trm.hardware import AcceleratorInfo, HardwareProfile
from trm.paths import cache_dir
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

ACTIVATION = "auto"
UNAVAILABLE_REASON = (
    "torch_xla is not installed (pip install torch==2.9.0 torch-xla==2.9.0; see docs/tpu.md)"
)
MESH_AXIS = "data"
"""The name of the mesh axis the batch dimension is sharded over."""


def is_available() -> bool:
    """Whether ``torch_xla`` can be imported here (looked up, not imported)."""
    return importlib.util.find_spec("torch_xla") is not None


def wants_auto() -> bool:
    """Whether ``runtime.device = "auto"`` means XLA: ``PJRT_DEVICE`` names the runtime."""
    return bool(os.environ.get("PJRT_DEVICE")) and is_available()


def _xla() -> ModuleType:
    """``torch_xla``, imported on first use (tens of seconds on a cold disk)."""
    import torch_xla

    return torch_xla


def _xm() -> ModuleType:
    import torch_xla.core.xla_model as xm

    return xm


def _xr() -> ModuleType:
    import torch_xla.runtime as xr

    return xr


def _xs() -> ModuleType:
    import torch_xla.distributed.spmd as xs

    return xs


@frozen
class XlaDevices:
    """What the XLA runtime says of this host's devices.

    ``hardware``: ``TPU``, ``CPU`` or ``CUDA`` (the PJRT plugin); ``kind`` the runtime's
    device kind (``TPU v4``, ``TPU v5 lite``, ``cpu``); ``generation`` the TPU generation
    parsed from it (``v4``, ``v5e``; None elsewhere); ``count`` the devices this process drives;
    ``chips`` the TPU chips they are (v2 and v3 have two devices a chip); ``memory_bytes`` one
    device's memory limit, None when the runtime does not say (the CPU); ``processes`` the
    hosts of a pod slice (1 on one host).
    """

    hardware: str
    kind: str
    generation: str | None
    count: int
    chips: int | None
    memory_bytes: int | None
    processes: int

    @property
    def native_bf16(self) -> bool:
        """TPUs multiply in bf16 natively; the CPU emulates it."""
        return self.hardware == "TPU"

    def describe(self) -> str:
        memory = f", {self.memory_bytes / 2**30:.0f} GiB each" if self.memory_bytes else ""
        chips = f" on {self.chips} chip(s)" if self.chips is not None else ""
        return f"{self.count} {self.kind} device(s){chips}{memory}"


def tpu_generation(kind: str) -> str | None:
    """``TPU v4`` -> ``v4``; ``TPU v5 lite`` -> ``v5e``; ``TPU v5p`` -> ``v5p``; else None."""
    match = re.match(r"^TPU\s*v(\d+)([a-z]?)(?:\s+(lite))?", kind.strip(), re.IGNORECASE)
    if not match:
        return None
    number, suffix, lite = match.groups()
    return f"v{number}{suffix.lower() or ('e' if lite else '')}"


def memory_info(device: torch.device | str | None = None) -> Mapping[str, int] | None:
    """The runtime's ``bytes_used`` / ``bytes_limit`` / ``peak_bytes_used`` for ``device``,
    or None where it keeps none (the CPU runtime answers UNIMPLEMENTED)."""
    try:
        info = _xm().get_memory_info(device)
    except Exception:
        return None
    return info if info and info.get("bytes_limit") else None


def use_compilation_cache() -> Path | None:
    """Keep compiled graphs on disk, so a resumed or repeated run loads them instead of
    compiling again: ``XLA_PERSISTENT_CACHE_PATH`` when the user set it, else trm's user
    cache (``xla-compile-cache``). Set before the runtime computes anything (it reads it once).

    Not on the CPU PJRT device (``PJRT_DEVICE=CPU``), which cannot load a saved executable
    (torch_xla 2.9 warns "Deserializing serialized executable not supported" at every compile
    and compiles anyway): None there, unless the user set the variable."""
    path = os.environ.get("XLA_PERSISTENT_CACHE_PATH")
    if not path and os.environ.get("PJRT_DEVICE", "").upper() == "CPU":
        return None
    if not path:
        path = str(cache_dir() / "xla-compile-cache")
        os.environ["XLA_PERSISTENT_CACHE_PATH"] = path
    return Path(path)


def read_devices(spmd_when_several: bool = True) -> XlaDevices:
    """Ask the runtime (this starts the PJRT client). With several local devices and
    ``spmd_when_several``, SPMD mode is turned on first thing, before anything is placed on a
    device (reading a device's kind or memory already locks the mode)."""
    xm, xr = _xm(), _xr()
    count = int(xr.addressable_runtime_device_count())
    if count > 1 and spmd_when_several:
        xr.use_spmd()
    hardware = str(xr.device_type() or "unknown")
    first = _xla().device()
    try:
        kind = str(xm.xla_device_kind(first))
    except Exception:
        kind = hardware.lower()
    generation = tpu_generation(kind) if hardware == "TPU" else None
    chips = None
    if hardware == "TPU":
        two_per_chip = generation in ("v2", "v3")
        chips = count // 2 if two_per_chip else count
    info = memory_info(first)
    return XlaDevices(
        hardware=hardware,
        kind=kind,
        generation=generation,
        count=count,
        chips=chips,
        memory_bytes=int(info["bytes_limit"]) if info else None,
        processes=int(xr.process_count()),
    )


class XlaBackend(DeviceBackend):
    """The device contract on PyTorch/XLA (see the module docstring).

    Starts idle; :meth:`start` (from ``configure_runtime``) reads the devices and, with more
    than one, turns SPMD on — once per process, before any tensor is placed, as PyTorch/XLA
    requires. SPMD mode and the device seed are process-wide state of the XLA runtime, so one
    backend object stands for them in the process.
    """

    name = "xla"
    torch_type = "xla"

    def __init__(self) -> None:
        self.devices: XlaDevices | None = None
        self.mesh: Any = None

    # ---- planning -----------------------------------------------------------------------

    def uses_device_memory(self) -> bool:
        """A TPU's tensors live in its HBM; the CPU runtime's in host memory."""
        return self.devices is not None and self.devices.hardware != "CPU"

    def unavailable_reason(self) -> str | None:
        return None if is_available() else UNAVAILABLE_REASON

    def start(self) -> XlaDevices:
        """Read the devices and, with more than one, turn SPMD on over a 1-D mesh; idempotent
        (the first call decides for the process)."""
        if self.devices is not None:
            return self.devices
        use_compilation_cache()
        devices = read_devices()
        if devices.count > 1:  # SPMD is on (read_devices)
            xs = _xs()
            self.mesh = xs.Mesh(np.arange(devices.count), (devices.count,), (MESH_AXIS,))
        self.devices = devices
        return devices

    def start_single_host(self) -> XlaDevices:
        """:meth:`start`, refusing a host of a multi-host pod slice (not supported) with a
        TrmError."""
        devices = self.start()
        if devices.processes > 1:
            raise TrmError(
                f"runtime.device = 'xla': this is one of {devices.processes} hosts of a TPU pod "
                "slice; trm drives one host's devices only (see docs/tpu.md, 'Known limits') "
                "— run on a single-host TPU VM"
            )
        return devices

    def machine_devices(self, hardware: HardwareProfile) -> list[str]:
        return ["xla:0"] if self.devices is not None else []

    def budget_bytes(self, hardware: HardwareProfile, device: torch.device) -> int | None:
        """All local devices' memory (the batch is split over them); None on the CPU runtime,
        whose tensors are in host memory."""
        if self.devices is None or self.devices.memory_bytes is None:
            return None
        return self.devices.memory_bytes * self.devices.count

    def compile_unavailable_reason(self) -> str | None:
        return "XLA traces each step and compiles it whole itself; torch.compile is not used"

    # ---- a step ---------------------------------------------------------------------------

    def to_device(
        self, batch: Mapping[str, np.ndarray | torch.Tensor], device: torch.device
    ) -> dict[str, torch.Tensor]:
        """Copy to the device; under SPMD shard each tensor's first (batch) dimension over the
        mesh. A first dimension that does not divide by the device count is replicated (none
        of a training batch: its size is checked when the run is configured)."""
        tensors = {k: t.to(device) for k, t in host_tensors(batch).items()}
        if self.mesh is not None:
            for tensor in tensors.values():
                self.shard_rows(tensor)
        return tensors

    def shard_rows(self, tensor: torch.Tensor) -> None:
        """Shard ``tensor``'s first dimension over the mesh (SPMD only; a no-op for a scalar
        or a first dimension the device count does not divide)."""
        if self.mesh is None or tensor.dim() == 0:
            return
        if tensor.shape[0] % self.mesh.size() != 0:
            return
        spec = (MESH_AXIS,) + (None,) * (tensor.dim() - 1)
        _xs().mark_sharding(tensor, self.mesh, spec)

    def autocast(
        self, device: torch.device, dtype: torch.dtype | None
    ) -> contextlib.AbstractContextManager:
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="xla", dtype=dtype)

    def mark_step(self, device: torch.device) -> None:
        """Cut the lazy graph traced since the last boundary and run it (asynchronously)."""
        _xla().sync()

    def step_peak_mb(self, device: torch.device) -> float | None:
        """The runtime's peak device memory, MiB — since the process started: XLA keeps no
        resettable per-step peak, so after the first steps it is the steady step's peak.
        None on the CPU runtime."""
        info = memory_info(device)
        return round(info["peak_bytes_used"] / 2**20, 1) if info else None

    def synchronize(self, device: torch.device) -> None:
        _xm().wait_device_ops()

    # ---- failures -------------------------------------------------------------------------

    def is_out_of_memory(self, error: BaseException) -> bool:
        """XLA reports a failed allocation (at compile or run time) as RESOURCE_EXHAUSTED."""
        return "RESOURCE_EXHAUSTED" in str(error)

    def memory_kind(self, error: BaseException) -> str:
        return "XLA device (TPU HBM)" if self.uses_device_memory() else "XLA device (host)"

    def used_fraction(self, device: torch.device) -> float | None:
        info = memory_info(device)
        return info["peak_bytes_used"] / info["bytes_limit"] if info else None

    # ---- resuming exactly -----------------------------------------------------------------

    def rng_state(self, device: torch.device) -> torch.Tensor | None:
        """The device seed (XLA's generator state is one unsigned 64-bit integer) as an int64
        host tensor holding the same bits. Read between steps it is a host value (each
        ``torch_xla.sync()`` advances it on the host), so reading it waits for nothing."""
        seed = int(_xm().get_rng_state(str(device)))
        return torch.tensor([seed - 2**64 if seed >= 2**63 else seed], dtype=torch.int64)

    def set_rng_state(self, state: torch.Tensor, device: torch.device) -> None:
        _xm().set_rng_state(int(state.reshape(-1)[0]) % 2**64, str(device))

    def seed(self, seed: int, device: torch.device) -> None:
        """Seed torch's CPU generator and the device generator (``torch.manual_seed`` does
        not reach it)."""
        super().seed(seed, device)
        _xm().set_rng_state(int(seed), str(device))

    # ---- compiling ------------------------------------------------------------------------

    def compile(self, net: torch.nn.Module) -> None:
        """Nothing: XLA compiles the traced step (never called: ``compile`` is always off)."""

    # ---- data parallelism and saving ------------------------------------------------------

    def replicas(self) -> int:
        """The local devices SPMD shards the batch over (1 without SPMD)."""
        return self.mesh.size() if self.mesh is not None else 1

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy (a sharded tensor is gathered whole)."""
        return tensor.detach().cpu()

    def describe(self) -> str:
        what = self.devices.describe() if self.devices is not None else "not started"
        return f"xla (PyTorch/XLA: a TPU, or the CPU with PJRT_DEVICE=CPU; {what})"


XLA = XlaBackend()


def choose_xla_precision(setting: str, devices: XlaDevices) -> tuple[str, list[str]]:
    """``runtime.precision`` on XLA: (precision, notices). ``auto`` is bf16 autocast on a TPU
    (bf16 matrix units) and fp32 elsewhere (the CPU runtime emulates bf16)."""
    notes: list[str] = []
    if setting == "auto":
        return ("bf16" if devices.native_bf16 else "fp32"), notes
    if setting == "bf16" and not devices.native_bf16:
        notes.append(f"bf16 autocast on {devices.kind}: emulated, slower than fp32")
    if setting == "fp16":
        notes.append("fp16 autocast without loss scaling: watch for a loss that stops moving")
    return setting, notes


def check_divides(spec: RunSpec, count: int) -> None:
    """Under SPMD every batch is split evenly over ``count`` devices: TrmError otherwise."""
    if count <= 1:
        return
    train, runtime = spec.train, spec.runtime
    sizes = [("train.global_batch_size", train.global_batch_size)]
    if runtime.micro_batch_size:
        sizes.append(("runtime.micro_batch_size", runtime.micro_batch_size))
    for key, size in sizes:
        if size % count:
            lower = size - size % count
            raise TrmError(
                f"{key} = {size} does not divide by the {count} XLA devices the batch is "
                f"sharded over; set it to a multiple of {count} (such as "
                f"{max(lower, count)})"
            )


@hookimpl
def device_backends() -> list[DeviceBackend]:
    return [XLA]


def _runs_here(spec: RunSpec) -> bool:
    device = spec.runtime.device
    return XLA.claims(device) or (device == "auto" and wants_auto())


@hookimpl
def check_spec(spec: RunSpec) -> None:
    """Refuse ``xla:N`` for N > 0 (one process drives every local device) and, for a run on
    this backend, a batch the local devices do not divide."""
    if not _runs_here(spec):
        return
    device = spec.runtime.device
    if device not in ("xla", "xla:0"):
        raise TrmError(
            f"runtime.device = {device!r}: the xla backend drives every local device at "
            "once (SPMD); set runtime.device = 'xla' (to use fewer devices, limit the runtime: "
            "CPU_NUM_DEVICES, or TPU_VISIBLE_CHIPS on a TPU VM)"
        )
    if spec.runtime.compile == "on":
        raise TrmError(
            "runtime.compile = 'on' but the xla backend does not use torch.compile (XLA "
            "compiles each traced step itself); set runtime.compile = 'auto' or 'off'"
        )
    check_divides(spec, XLA.start_single_host().count)


@hookimpl
def detect_hardware() -> HardwareProfile | None:
    """The XLA devices of this host (``accelerators``: kind ``xla``, the runtime's device
    kind, the TPU generation, the chip count, one device's memory) — only when
    ``PJRT_DEVICE`` is set, since reading them starts the XLA runtime (and SPMD with several
    devices), which only a run on this backend should pay for."""
    if not wants_auto():
        return None
    devices = XLA.start()
    return HardwareProfile(
        accelerators=(
            AcceleratorInfo(
                kind="xla",
                name=devices.kind,
                generation=devices.generation,
                count=devices.chips if devices.chips is not None else devices.count,
                memory_total_bytes=devices.memory_bytes,
                bf16=devices.native_bf16,
            ),
        )
    )


@hookimpl(tryfirst=True)
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Answer for ``xla`` (and ``auto`` when ``PJRT_DEVICE`` is set): the first device (the
    SPMD mesh's virtual device when several), bf16 on a TPU, no torch.compile; host threads
    for the work left on the CPU (data, the loop)."""
    if not _runs_here(spec):
        return None
    devices = XLA.start_single_host()
    check_divides(spec, devices.count)
    precision, notes = choose_xla_precision(spec.runtime.precision, devices)
    threads = spec.runtime.threads or max(1, hardware.physical_cores or 1)
    torch.set_num_threads(threads)
    spmd = f"; SPMD data parallel over {devices.count} devices" if devices.count > 1 else ""
    notes.insert(0, f"XLA: {devices.describe()}{spmd}")
    notes.append("XLA compiles each traced step whole (torch.compile is not used)")
    return RuntimeChoice(
        device=str(_xla().device()),
        precision=precision,
        threads=threads,
        compile=False,
        notes=tuple(notes),
        backend=XLA,
    )
