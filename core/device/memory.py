"""Device memory: freeing caches, the step's peak, pressure, a device's budget, and which
devices a machine has.

The core owns the device's peak-memory counter: the loop calls :func:`begin_step` before
every optimizer step (which resets CUDA's peak statistics) and :func:`step_peak_mb` after it,
so ``mem_device_mb`` in metrics.jsonl is the peak of that step. Plugins read
:func:`used_fraction`; they never reset a counter.
"""

from __future__ import annotations

import gc

import torch

from trm.hardware import HardwareProfile


def free_cached_memory(device: torch.device) -> None:
    """Collect garbage and hand the allocator's cached blocks on ``device`` back."""
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    elif device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.empty_cache()


def begin_step(device: torch.device) -> None:
    """Start measuring a step's peak (CUDA: reset the peak statistics); called by the loop."""
    if device.type == "cuda" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats(device)


def step_peak_mb(device: torch.device) -> float | None:
    """Device memory of the step since :func:`begin_step`, MiB: CUDA's peak allocated, MPS's
    current allocation (MPS keeps no peak); None on the CPU."""
    if device.type == "cuda" and torch.cuda.is_available():
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    if device.type == "mps" and hasattr(torch, "mps"):
        return round(torch.mps.current_allocated_memory() / 2**20, 1)
    return None


def used_fraction(device: torch.device) -> float | None:
    """How full ``device`` is, in [0, 1]: CUDA's peak reserved memory of the current step over
    the card's total; MPS's driver allocation over its recommended maximum; None on the CPU
    or when it cannot be read. Reads only; resets nothing."""
    if device.type == "cuda" and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(device).total_memory
        return torch.cuda.max_memory_reserved(device) / total
    if device.type == "mps" and hasattr(torch, "mps"):
        limit = torch.mps.recommended_max_memory()
        return torch.mps.driver_allocated_memory() / limit if limit else None
    return None


def machine_devices(hardware: HardwareProfile) -> list[str]:
    """Every device of this machine: the CPU, each CUDA GPU, the Apple GPU."""
    devices = ["cpu"]
    devices += [f"cuda:{g.index}" for g in hardware.gpus or ()]
    if not hardware.gpus and hardware.cuda_devices:
        devices += [f"cuda:{i}" for i in range(len(hardware.cuda_devices))]
    if hardware.mps_available:
        devices.append("mps")
    return devices


def shares_host_memory(hardware: HardwareProfile, device: str) -> bool:
    """Whether ``device``'s memory is the host's (an Apple GPU on unified memory)."""
    return bool(hardware.unified_memory) and device == "mps"


def budget_bytes(hardware: HardwareProfile, device: str) -> int | None:
    """The accelerator memory a run on ``device`` may use; None on the CPU (the host budget
    applies). An Apple GPU shares the host's memory, so its budget is the host's."""
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        for gpu in hardware.gpus or ():
            if gpu.index == index and gpu.memory_total_bytes:
                return gpu.memory_total_bytes
        return hardware.cuda_memory_bytes
    if device == "mps":
        return hardware.memory_budget_bytes
    return None
