"""The runtime a backend plugin chose: device, precision, threads, compilation."""

from __future__ import annotations

from attrs import frozen


@frozen
class RuntimeChoice:
    """Returned by ``configure_runtime``; ``notes`` are shown to the user once at start.

    ``reuse_host_memory``: the loop keeps freed host memory for reuse
    (:func:`trm.device.host_memory.reuse_freed_memory`) when it starts training.
    """

    device: str
    precision: str
    threads: int
    compile: bool
    notes: tuple[str, ...] = ()
    reuse_host_memory: bool = False

    @property
    def autocast_dtype(self):
        """The torch dtype for autocast, or None for plain fp32."""
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
