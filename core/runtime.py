"""The runtime a backend plugin chose: device, precision, threads, compilation."""

from __future__ import annotations

from attrs import frozen


@frozen
class RuntimeChoice:
    """Returned by ``configure_runtime``; ``notes`` are shown to the user once at start."""

    device: str
    precision: str
    threads: int
    compile: bool
    notes: tuple[str, ...] = ()

    @property
    def autocast_dtype(self):
        """The torch dtype for autocast, or None for plain fp32."""
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
