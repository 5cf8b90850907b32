"""The runtime a backend plugin chose: device, precision, threads, compilation, and the backend
that carries out the device contract (:mod:`trm.device.contract`)."""

from __future__ import annotations

import torch
from attrs import field, frozen

from trm.device.contract import HOST, DeviceBackend, Placement


@frozen
class RuntimeChoice:
    """Returned by ``configure_runtime``; ``notes`` are shown to the user once at start.

    ``device`` is a torch device string (``cpu``, ``cuda:1``, ``xla:0``); ``backend`` the
    object that knows that device (the host's behaviour when a plugin gives none).
    ``reuse_host_memory``: the loop keeps freed host memory for reuse
    (:func:`trm.device.host_memory.reuse_freed_memory`) when it starts training.
    ``compile_by_planner``: ``runtime.compile = "auto"`` left the choice to the planner, which
    weighed the run's steps against this machine's measured compile cost
    (:mod:`trm.plan.compile_choice`); a resumed run then keeps what its checkpoint ran.
    ``compile_key``: the compile ledger's key for this run's step, set by the planner; the
    loop records the run's step time under it (:mod:`trm.loop.compile_record`).
    ``graphs``: where the network is compiled, replay its kernels as device graphs (CUDA
    graphs, ``runtime.cuda_graphs``); a capture that fails falls back to compiled kernels
    without graphs, with one line (:mod:`trm.loop.oom_retry`).
    """

    device: str
    precision: str
    threads: int
    compile: bool
    notes: tuple[str, ...] = ()
    reuse_host_memory: bool = False
    compile_by_planner: bool = False
    compile_key: str | None = None
    graphs: bool = False
    backend: DeviceBackend = field(default=HOST, eq=False, repr=False)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The torch dtype for autocast, or None for plain fp32."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    @property
    def backend_name(self) -> str:
        """The name the backend claims (``cuda``, ``xla``), for records and messages."""
        return self.backend.name

    def placement(self) -> Placement:
        """The run's backend, device and autocast dtype, as the loop passes them on."""
        return Placement(self.backend, torch.device(self.device), self.autocast_dtype)
