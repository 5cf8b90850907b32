"""The device memory a CUDA GPU adds to a training step beyond its tensors: the context, the
cuBLAS workspace, PyTorch's caching allocator (its rounding and holes) and, under torchrun,
NCCL's buffers and the flattened gradients. The CUDA backend's
:meth:`~trm.device.contract.DeviceBackend.allocator_items`; the planner counts the tensors.

benchmarks/gpu.py compares the estimate with ``torch.cuda.max_memory_allocated``. On one
NVIDIA H200 (the first GPU run, 2026-11-26: the quickstart, bf16 eager, micro-batch 128) the
model came out 9% low (233.5 MiB against 256.9 MiB measured) with the fragmentation allowance
at 10%; that run's results document was not saved (docs/performance.md marks it not
recorded). The allowance is fitted to it: 25% puts that estimate at 260.4 MiB, 1.4% over the
measured peak. One shape was measured; the attention shapes were not. None of the CPU/glibc
allowances of the built-in estimate applies to a CUDA device.
"""

from __future__ import annotations

import os

from trm.hardware import format_bytes
from trm.memory import MemoryItem, StepMemory

MIB = 2**20
F32 = 4

# The context (driver, kernels) lives outside PyTorch's allocator; cuBLAS keeps a workspace
# per stream.
CONTEXT_BYTES = 500 * MIB
CUBLAS_WORKSPACE_BYTES = 32 * MIB
# The caching allocator's model (PyTorch's CUDACachingAllocator, as documented in its source):
# every block is rounded up to BLOCK_ROUND_BYTES; a tensor above LARGE_ALLOC_BYTES gets a
# segment of its own rounded up to SEGMENT_ROUND_BYTES, which nothing else shares; smaller
# ones are cut from shared 2 / 20 MiB segments. Freed blocks stay reserved and are split for
# later requests, so the tensors that are freed and allocated again every micro-batch
# (activations, step transients) leave holes: FRAGMENTATION_FRACTION of them. The fraction
# also carries what the model misses of those tensors on a GPU: fitted to the H200 run named
# in the module's docstring.
BLOCK_ROUND_BYTES = 512
LARGE_ALLOC_BYTES = 10 * MIB
SEGMENT_ROUND_BYTES = 2 * MIB
FRAGMENTATION_FRACTION = 0.25
# NCCL (torchrun): each communicator keeps, per channel and per ring neighbour (2), one buffer
# per protocol: Simple (NCCL_BUFFSIZE, default 4 MiB), LL128 (about the same) and LL
# (256 KiB). The channel count depends on the GPUs' links; NCCL_MAX_NCHANNELS caps it.
# Assumed 16 channels (not measured); the flattened gradient all-reduce
# (trm.device.distributed.all_reduce_sum_) also holds one copy of the gradients.
NCCL_DEFAULT_BUFFSIZE_BYTES = 4 * MIB
NCCL_LL_BYTES = 256 * 1024
NCCL_ASSUMED_CHANNELS = 16
NCCL_RING_NEIGHBOURS = 2
# CUDA graphs (torch.compile's cudagraph trees) allocate every tensor a replayed graph makes
# from a private pool that stays reserved between replays and that eager code (the optimizer,
# EMA, evaluation) cannot reuse: the step's reallocated tensors are then held once more, in
# the pool. Counted whole (not measured on a GPU yet: benchmarks/gpu_graphs.sh measures it).
GRAPH_POOL_FRACTION = 1.0


def block_bytes(size_bytes: int) -> int:
    """What the caching allocator reserves for one tensor of ``size_bytes``: the block
    rounded up to ``BLOCK_ROUND_BYTES``; above ``LARGE_ALLOC_BYTES`` a segment of its own,
    rounded up to ``SEGMENT_ROUND_BYTES`` (see the constants)."""
    unit = SEGMENT_ROUND_BYTES if size_bytes > LARGE_ALLOC_BYTES else BLOCK_ROUND_BYTES
    return -(-size_bytes // unit) * unit


def rounding_bytes(step: StepMemory) -> int:
    """Bytes the caching allocator's rounding adds to the step's kept activations (every
    activation tensor, as many times as the peak holds it)."""
    per_copy = sum(block_bytes(b) - b for b in step.activation_tensor_bytes)
    return step.activation_tensor_copies * per_copy


def nccl_buffer_bytes() -> tuple[int, str]:
    """Device bytes one NCCL communicator keeps (see the constants), and the note saying
    how they were counted; ``NCCL_BUFFSIZE`` and ``NCCL_MAX_NCHANNELS`` are read when set."""
    text = os.environ.get("NCCL_BUFFSIZE", "").strip()
    buffsize = int(text) if text.isdigit() else NCCL_DEFAULT_BUFFSIZE_BYTES
    text = os.environ.get("NCCL_MAX_NCHANNELS", "").strip()
    channels = min(int(text), NCCL_ASSUMED_CHANNELS) if text.isdigit() else NCCL_ASSUMED_CHANNELS
    per_peer = 2 * buffsize + NCCL_LL_BYTES  # Simple + LL128 + LL
    total = NCCL_RING_NEIGHBOURS * channels * per_peer
    note = (
        f"{channels} channels x {NCCL_RING_NEIGHBOURS} ring neighbours x (2 x "
        f"{format_bytes(buffsize)} + {NCCL_LL_BYTES // 1024} KiB) per protocol "
        "(an assumed channel count: not measured on a GPU yet)"
    )
    return total, note


def allocator_items(step: StepMemory) -> list[MemoryItem]:
    """The CUDA items of a step's device memory (see the module docstring)."""
    rounding = rounding_bytes(step)
    fragmentation = rounding + FRAGMENTATION_FRACTION * step.reallocated_bytes
    items = [
        MemoryItem(
            "CUDA context",
            CONTEXT_BYTES,
            "device",
            "driver and kernel images, outside PyTorch's allocator (typical size, not measured)",
        ),
        MemoryItem(
            "cuBLAS workspace",
            CUBLAS_WORKSPACE_BYTES,
            "device",
            "matrix-product workspace per stream",
        ),
        MemoryItem(
            "allocator fragmentation",
            max(0, int(fragmentation)),
            "device",
            f"CUDA caching allocator: blocks rounded to {BLOCK_ROUND_BYTES} bytes and "
            f"tensors over {LARGE_ALLOC_BYTES // MIB} MiB to "
            f"{SEGMENT_ROUND_BYTES // MIB} MiB segments ({format_bytes(rounding)}), and "
            f"holes of {FRAGMENTATION_FRACTION:.0%} of the tensors freed every "
            "micro-batch (an allowance fitted to one H200 measurement of the quickstart)",
        ),
    ]
    if step.graphs:
        items.append(
            MemoryItem(
                "CUDA graph pool",
                int(GRAPH_POOL_FRACTION * step.reallocated_bytes),
                "device",
                "the replayed graphs' private pool keeps the step's activations and "
                "transients reserved between steps (an allowance, not measured on a GPU yet)",
            )
        )
    if step.world_size > 1:
        nccl, nccl_note = nccl_buffer_bytes()
        items.append(MemoryItem("NCCL buffers", nccl, "device", nccl_note))
        items.append(
            MemoryItem(
                "gradient all-reduce buffer",
                step.gradient_bytes,
                "device",
                "the gradients flattened into one buffer for the all-reduce",
            )
        )
    return items
