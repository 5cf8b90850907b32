"""The device contract: everything trm does differently per kind of device, in one interface.

A backend plugin (built-in: ``cpu``, ``cuda``, ``mps``, ``xla``; or a third party's
``pip install trm-npu``) subclasses :class:`DeviceBackend`, lists its instances from the
``device_backends`` hook (which names it claims for ``runtime.device``) and hands the one
it chose to the loop in ``RuntimeChoice.backend`` from ``configure_runtime``. The core then
calls only these methods; it holds no branch on a device kind.

The base class is the behaviour of a device whose tensors live in host memory (the CPU): every
method has a working default, so a backend overrides only what differs. The contract, by
phase of a run:

- planning: :meth:`~DeviceBackend.claims`, :meth:`~DeviceBackend.unavailable_reason`,
  :meth:`~DeviceBackend.uses_device_memory`, :meth:`~DeviceBackend.machine_devices`,
  :meth:`~DeviceBackend.budget_bytes`, :meth:`~DeviceBackend.shares_host_memory`,
  :meth:`~DeviceBackend.allocator_items`, :meth:`~DeviceBackend.replicas`,
  :meth:`~DeviceBackend.compile_unavailable_reason`;
- a step: :meth:`~DeviceBackend.to_device` (pinned, non-blocking copies where that helps),
  :meth:`~DeviceBackend.autocast`, :meth:`~DeviceBackend.begin_step`,
  :meth:`~DeviceBackend.mark_step` (the step boundary: XLA cuts and runs its graph there),
  :meth:`~DeviceBackend.step_peak_mb`, :meth:`~DeviceBackend.synchronize`;
- failures: :meth:`~DeviceBackend.is_out_of_memory`, :meth:`~DeviceBackend.memory_kind`,
  :meth:`~DeviceBackend.free_cached_memory`, :meth:`~DeviceBackend.used_fraction`;
- seeding and resuming exactly: :meth:`~DeviceBackend.seed`,
  :meth:`~DeviceBackend.rng_state`, :meth:`~DeviceBackend.set_rng_state`;
- compiling: :meth:`~DeviceBackend.compile`, :meth:`~DeviceBackend.position_major_mlp`;
- data parallelism: :meth:`~DeviceBackend.process_group_backends`,
  :meth:`~DeviceBackend.prepare_process_group`;
- saving and reading: :meth:`~DeviceBackend.to_host` (checkpoints are written from host
  tensors), :meth:`~DeviceBackend.read_values` (a step's one host read).

:class:`Placement` binds a backend to the device and autocast dtype of a run: the object the
loop passes around instead of ``(device, dtype)`` pairs.

Every method that takes a device takes a ``torch.device`` (the planner builds one from
``RuntimeChoice.device``); the class variables are facts that never change for a backend, and
anything that depends on the machine or the run is a method.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from attrs import frozen

from trm.hardware import HardwareProfile
from trm.memory import MemoryItem, StepMemory


class DeviceBackend:
    """One kind of device, as the loop needs it. Subclass and override what differs.

    ``name`` is the ``runtime.device`` value the backend claims (also with an index,
    ``name:N``); ``torch_type`` the torch device type its tensors live on (a backend may run
    on another's tensors: a checked CPU device is ``name = "cpu-checked"``,
    ``torch_type = "cpu"``). ``pins_host_batches``: batches are gathered into pinned host
    memory, for a device that copies from it asynchronously (CUDA).
    """

    name: ClassVar[str] = "cpu"
    torch_type: ClassVar[str] = "cpu"
    pins_host_batches: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _adopt_older_names(cls)

    # ---- planning -----------------------------------------------------------------------

    def claims(self, device: str) -> bool:
        """Whether ``runtime.device = device`` names this backend (``name`` or ``name:N``)."""
        return device == self.name or device.startswith(f"{self.name}:")

    def unavailable_reason(self) -> str | None:
        """Why the device cannot be used here (one clause, for errors), or None when it can."""
        return None

    def uses_device_memory(self) -> bool:
        """Whether tensors live in memory of the device's own, apart from the host's: the
        estimate then counts them under "device", and readers gather batches ahead of the
        loop. False by default (tensors in host memory)."""
        return False

    def machine_devices(self, hardware: HardwareProfile) -> list[str]:
        """Every device of this kind the machine has, as ``torch.device`` strings (measured
        one by one by ``trm analyze --benchmark``)."""
        return [self.torch_type]

    def budget_bytes(self, hardware: HardwareProfile, device: torch.device) -> int | None:
        """The device memory a run on ``device`` may use; None when the host budget applies
        (tensors in host memory)."""
        return None

    def shares_host_memory(self, hardware: HardwareProfile, device: torch.device) -> bool:
        """Whether ``device``'s memory is the host's (unified memory), so both budgets are one."""
        return False

    def allocator_items(self, step: StepMemory) -> list[MemoryItem]:
        """The device memory this backend's own runtime and allocator add to a training step
        whose tensors the planner counted (``step``): a context, workspaces, the allocator's
        rounding and holes, collective buffers. Asked by the built-in estimate when
        :meth:`uses_device_memory`; the items go under "device". No items by default."""
        return []

    def replicas(self) -> int:
        """Devices one process drives in data parallel (1; SPMD backends: every local
        device). Asked by the planner, which splits the global batch over ``replicas()``
        times the ranks, so a micro-batch is chosen per device."""
        return 1

    def compile_unavailable_reason(self) -> str | None:
        """Why torch.compile cannot work on this device here, or None when it can.
        The default: not attempted (a backend that compiles says so by overriding)."""
        return f"torch.compile is not set up for the {self.name} backend"

    # ---- a step ---------------------------------------------------------------------------

    def to_device(
        self, batch: Mapping[str, np.ndarray | torch.Tensor], device: torch.device
    ) -> dict[str, torch.Tensor]:
        """Host arrays (or host tensors) as ``device`` tensors. The default shares the arrays'
        memory on the host and copies synchronously elsewhere."""
        return {k: t.to(device) for k, t in host_tensors(batch).items()}

    def autocast(
        self, device: torch.device, dtype: torch.dtype | None
    ) -> contextlib.AbstractContextManager:
        """An autocast context for ``dtype`` on ``device``, or a no-op for fp32 (None)."""
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    def begin_step(self, device: torch.device) -> None:
        """Start measuring a step's peak memory (called by the loop before every step)."""

    def mark_step(self, device: torch.device) -> None:
        """The end of one optimizer step's work (after the update, before any host read the
        loop makes of it): a lazy-tensor device runs the step's graph here. No-op by default."""

    def step_peak_mb(self, device: torch.device) -> float | None:
        """Device memory of the step since :meth:`begin_step`, MiB; None when the device has
        no memory of its own or cannot say."""
        return None

    def synchronize(self, device: torch.device) -> None:
        """Wait until ``device`` has finished its queued work (timing, benchmarks)."""

    # ---- failures -------------------------------------------------------------------------

    def is_out_of_memory(self, error: BaseException) -> bool:
        """Whether ``error`` means this device's memory ran out (the host's out-of-memory
        errors are recognised by the core, :func:`trm.device.oom.is_out_of_memory`)."""
        return False

    def memory_kind(self, error: BaseException) -> str:
        """Which memory ran out, in words, for messages ("CUDA device", "host"): by default
        "device" for torch's own out-of-memory type (raised by device allocators), else "host"."""
        oom_type = getattr(torch, "OutOfMemoryError", None)
        return "device" if oom_type is not None and isinstance(error, oom_type) else "host"

    def free_cached_memory(self, device: torch.device) -> None:
        """Collect garbage and give the allocator's cached blocks on ``device`` back."""
        gc.collect()

    def used_fraction(self, device: torch.device) -> float | None:
        """How full ``device`` is, in [0, 1], or None (host memory, or unreadable).
        Reads only; resets nothing."""
        return None

    # ---- seeding and resuming exactly --------------------------------------------------

    def seed(self, seed: int, device: torch.device) -> None:
        """Seed every generator a run on ``device`` draws from, at the start of a fresh run
        (the loop calls it before building the model). The default seeds torch's CPU
        generator with ``torch.manual_seed``, which seeds CUDA's too; a device whose own
        generator it does not reach (XLA) seeds that as well."""
        torch.manual_seed(seed)

    def rng_state(self, device: torch.device) -> torch.Tensor | None:
        """The generator state of ``device`` (this process's device only), as a host
        tensor; None when the device draws from torch's CPU generator."""
        return None

    def set_rng_state(self, state: torch.Tensor, device: torch.device) -> None:
        """Restore what :meth:`rng_state` returned on the same kind of device."""

    # ---- compiling ------------------------------------------------------------------------

    def compile(self, net: torch.nn.Module, graphs: bool = False) -> None:
        """Compile ``net`` in place (state-dict keys unchanged); called only when the
        runtime chose to compile. ``graphs``: the runtime asked for the compiled kernels to
        be replayed as device graphs (``RuntimeChoice.graphs``; only a backend that has them
        acts on it)."""
        net.compile()

    def position_major_mlp(self, compiled: bool) -> bool:
        """Whether the MLP variant's network (``arch.mlp_t``) runs position-major ([P, B, D],
        no transposes) rather than token-major (the reference's [B, P, D] with transposes)
        on this device, ``compiled`` or eager. The two compute the same function with the
        same parameters; only speed differs. The default is position-major."""
        return True

    # ---- data parallelism and saving ------------------------------------------------------

    def process_group_backends(self) -> Mapping[str, str]:
        """The torch.distributed backends this device's tensors use in a torchrun job, by
        torch device type (NCCL for CUDA tensors: ``{torch_type: "nccl"}``); empty when the
        device has none (CPU tensors always use gloo)."""
        return {}

    def prepare_process_group(self) -> None:
        """Set what this backend's collective library reads before a torchrun process group
        starts (environment defaults the user has not set). Nothing by default."""

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` detached on the host, for a checkpoint (a host tensor as it is)."""
        return tensor.detach().cpu()

    def read_values(self, tensor: torch.Tensor) -> list[float]:
        """The values of a small device tensor on the host, waiting for the device: the one
        host read a training step makes (its loss and metric sums). Always a real copy, so a
        counter of host reads sees it on every device, the CPU included."""
        return tensor.detach().to("cpu", copy=True).tolist()

    def describe(self) -> str:
        """One line for ``trm plugins`` and errors: the name and what it runs on."""
        return self.name


# Older names of the contract, still honoured in a subclass that defines them, so a backend
# written with them keeps working: a method is_available() returning the reason or None, and
# two class variables that became methods.
_OLDER_NAMES = {
    "is_available": "unavailable_reason",
    "has_device_memory": "uses_device_memory",
    "process_groups": "process_group_backends",
}


def _adopt_older_names(cls: type[DeviceBackend]) -> None:
    """Map a subclass's members under the older names onto the current methods
    (with a DeprecationWarning), unless the subclass defines the current ones itself."""
    for older, current in _OLDER_NAMES.items():
        if older not in cls.__dict__ or current in cls.__dict__:
            continue
        warnings.warn(
            f"{cls.__name__}.{older} is the device contract's older name; define "
            f"{current}() instead",
            DeprecationWarning,
            stacklevel=3,
        )
        value = cls.__dict__[older]
        if isinstance(value, property):
            setattr(cls, current, value.fget)
        elif callable(value):
            setattr(cls, current, value)
        else:
            setattr(cls, current, lambda self, _value=value: _value)


def host_tensors(batch: Mapping[str, np.ndarray | torch.Tensor]) -> dict[str, torch.Tensor]:
    """Host arrays as torch tensors sharing their memory (contiguous first); tensors as given."""
    return {
        k: v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
        for k, v in batch.items()
    }


@frozen
class Placement:
    """Where a run's tensors live and how its products are computed: the backend, the
    device, and the autocast dtype (None: fp32). The loop, evaluation and inference take
    one of these instead of ``(device, dtype)``."""

    backend: DeviceBackend
    device: torch.device
    dtype: torch.dtype | None = None

    def to_device(self, batch: Mapping[str, np.ndarray | torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.backend.to_device(batch, self.device)

    def autocast(self) -> contextlib.AbstractContextManager:
        return self.backend.autocast(self.device, self.dtype)

    def mark_step(self) -> None:
        self.backend.mark_step(self.device)

    def synchronize(self) -> None:
        self.backend.synchronize(self.device)


HOST = DeviceBackend()
"""The host's behaviour, for code that runs on the CPU with no backend chosen (tests, tools)."""


def host_placement(dtype: torch.dtype | None = None) -> Placement:
    """A placement on the CPU with the host's behaviour."""
    return Placement(HOST, torch.device("cpu"), dtype)
