"""The memory estimate and the tiers on CUDA, with fake GPUs: the caching allocator's model,
NCCL's buffers under torchrun, an EMA of the trainable parameters only, micro-batches that
divide this process's rows, and the bf16 check of this rank's GPU."""

from __future__ import annotations

import attrs
import pytest

from trm.data.shape import DatasetShape
from trm.hardware import AcceleratorInfo, HardwareProfile
from trm.memory import MemoryEstimate, MemoryItem
from trm.model import EMA
from trm.model.trm import TinyRecursiveModel
from trm.plugins.backends import cuda_allocator
from trm.plugins.backends.cuda import CUDA
from trm.plugins.planning import memory_estimator, tiers
from trm.runtime import RuntimeChoice
from trm.spec import ArchSpec, RunSpec, RuntimeSpec, TrainSpec, load_spec, resolve_spec_path

GIB = 2**30
SUDOKU = DatasetShape(seq_len=81, vocab_size=11, num_puzzle_identifiers=1)
# ARC-AGI-1 as the paper trains it: 30x30 grids, about 876,000 augmented puzzle identifiers
# (1,000 versions of each task): a 512-wide table of 1.8 GB.
ARC = DatasetShape(seq_len=900, vocab_size=12, num_puzzle_identifiers=876_406)
CUDA_BF16 = RuntimeChoice("cuda:0", "bf16", 1, False, backend=CUDA)


def torchrun_env(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> None:
    for name, value in (
        ("RANK", rank),
        ("WORLD_SIZE", world),
        ("LOCAL_RANK", rank),
        ("LOCAL_WORLD_SIZE", world),
    ):
        monkeypatch.setenv(name, str(value))


def items_of(spec: RunSpec, shape: DatasetShape, runtime: RuntimeChoice = CUDA_BF16, world=1):
    items = memory_estimator.estimate_items(spec, HardwareProfile(), runtime, shape, 0, world)
    return {item.name: item for item in items}


def test_no_cpu_or_glibc_allowance_reaches_a_cuda_estimate(monkeypatch):
    """The CPU's measured allowances (runtime pages, glibc heap slack) must not change what a
    CUDA run's device is charged: inflating every one of them leaves the device total as it
    was, and the CUDA items say their figures are not measured on a GPU."""
    spec = RunSpec(train=TrainSpec(global_batch_size=64))
    before = items_of(spec, SUDOKU)
    monkeypatch.setattr(memory_estimator, "CPU_RUNTIME_BYTES", 100 * GIB)
    slack = {key: 50.0 for key in memory_estimator.HEAP_SLACK_FRACTION}
    monkeypatch.setattr(memory_estimator, "HEAP_SLACK_FRACTION", slack)
    monkeypatch.setattr(memory_estimator, "COMPILED_HEAP_SLACK_FRACTION", {})
    monkeypatch.setattr(memory_estimator, "LARGE_TENSOR_SLACK", 50.0)
    monkeypatch.setattr(memory_estimator, "EAGER_LARGE_TENSOR_SLACK", 50.0)
    monkeypatch.setattr(memory_estimator, "MICRO_BATCH_HEAP_GROWTH", {"compiled": 9, "eager": 9})
    after = items_of(spec, SUDOKU)

    def device_total(items):
        return sum(i.bytes for i in items.values() if i.location == "device")

    assert device_total(after) == device_total(before)
    assert "CPU runtime" not in after
    assert "fitted to one H200 measurement" in after["allocator fragmentation"].note


# The quickstart as benchmarks/gpu.py trained it on one NVIDIA H200 (bf16 eager, micro-batch
# 128; docs/performance.md, "GPU"): torch.cuda.max_memory_allocated over the steps, MiB.
H200_QUICKSTART_PEAK_MIB = 256.9
QUICKSTART_SHAPE = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)


def test_the_cuda_estimate_covers_the_peak_measured_on_an_h200():
    """The estimate benchmarks/gpu.py compares (device items less the CUDA context, which
    lives outside PyTorch's allocator) is at or above the measured peak, and not far above."""
    spec = load_spec(resolve_spec_path("quickstart"))
    runtime = attrs.evolve(spec.runtime, precision="bf16", micro_batch_size=128)
    items = items_of(attrs.evolve(spec, runtime=runtime), QUICKSTART_SHAPE)
    allocator_mib = (
        sum(i.bytes for i in items.values() if i.location == "device" and i.name != "CUDA context")
        / 2**20
    )
    assert H200_QUICKSTART_PEAK_MIB <= allocator_mib <= 1.1 * H200_QUICKSTART_PEAK_MIB


def test_the_caching_allocator_rounds_large_tensors_to_whole_segments():
    assert cuda_allocator.block_bytes(1) == 512
    assert cuda_allocator.block_bytes(513) == 1024
    ten_mib_and_a_byte = 10 * 2**20 + 1
    assert cuda_allocator.block_bytes(ten_mib_and_a_byte) == 12 * 2**20
    # the fragmentation item holds the rounding of the kept activations plus the allowance
    spec = RunSpec(train=TrainSpec(global_batch_size=64))
    items = items_of(spec, SUDOKU)
    step = memory_estimator.plan_step(spec, CUDA_BF16, SUDOKU, 1)
    tensors = memory_estimator.step_tensors(step)
    rounding = cuda_allocator.rounding_bytes(memory_estimator.device_step_memory(step, tensors))
    transient = items["activations"].bytes + items["step transients"].bytes
    expected = rounding + cuda_allocator.FRAGMENTATION_FRACTION * transient
    assert items["allocator fragmentation"].bytes == int(expected)


def test_nccl_buffers_are_an_item_only_under_torchrun_with_cuda(monkeypatch):
    spec = RunSpec(train=TrainSpec(global_batch_size=64))
    assert "NCCL buffers" not in items_of(spec, SUDOKU, world=1)
    two = items_of(spec, SUDOKU, world=2)
    assert two["NCCL buffers"].location == "device"
    channels, peers = cuda_allocator.NCCL_ASSUMED_CHANNELS, cuda_allocator.NCCL_RING_NEIGHBOURS
    assert two["NCCL buffers"].bytes == peers * channels * (2 * 4 * 2**20 + 256 * 1024)
    params = memory_estimator.model_sizes(spec.arch, SUDOKU).params
    assert two["gradient all-reduce buffer"].bytes == 4 * params
    cpu = items_of(spec, SUDOKU, RuntimeChoice("cpu", "fp32", 1, False), world=2)
    assert "NCCL buffers" not in cpu  # gloo on the CPU keeps no device buffers
    monkeypatch.setenv("NCCL_BUFFSIZE", str(2 * 2**20))
    monkeypatch.setenv("NCCL_MAX_NCHANNELS", "4")
    smaller = items_of(spec, SUDOKU, world=2)["NCCL buffers"].bytes
    assert smaller == peers * 4 * (2 * 2 * 2**20 + 256 * 1024)


def test_the_ema_item_counts_what_the_real_ema_holds():
    arch = ArchSpec(hidden_size=64, num_heads=2, puzzle_emb_ndim=64, puzzle_emb_len=1)
    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=50)
    model = TinyRecursiveModel(arch, shape.seq_len, shape.vocab_size, 50)
    held = sum(t.numel() * t.element_size() for t in EMA(model, 0.999).shadow.values())
    spec = RunSpec(arch=arch, train=TrainSpec(global_batch_size=8, ema=True))
    assert items_of(spec, shape)["EMA copy"].bytes == held


def test_at_arc_scale_the_ema_item_leaves_out_the_1_8_gb_puzzle_table():
    spec = load_spec(resolve_spec_path("arc-agi-1"))
    spec = attrs.evolve(spec, train=attrs.evolve(spec.train, ema=True))
    items = items_of(spec, ARC)
    table = items["puzzle embedding table"].bytes
    assert table > 1.7e9  # the table the old count added to the EMA
    sizes = memory_estimator.model_sizes(spec.arch, ARC)
    assert items["EMA copy"].bytes == 4 * sizes.params < 0.02 * table


def divisor_estimate(budget: int, per_row: int):
    def make(spec: RunSpec) -> MemoryEstimate:
        micro = spec.runtime.micro_batch_size or spec.train.global_batch_size
        items = (MemoryItem("activations", per_row * micro, "device"),)
        return MemoryEstimate(items=items, device_budget_bytes=budget, remake=make)

    return make


def spec_of(batch: int) -> RunSpec:
    return RunSpec(
        train=TrainSpec(global_batch_size=batch, max_steps=1),
        runtime=RuntimeSpec(precision="fp32", threads=1),
    )


@pytest.mark.parametrize("per_row_mib", [1, 7, 50, 97, 333])
def test_the_tier_picks_a_micro_batch_that_divides_the_batch(per_row_mib):
    make = divisor_estimate(10 * GIB, per_row_mib * 2**20)
    spec = spec_of(768)
    adapted, _ = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    micro = adapted.runtime.micro_batch_size
    assert 768 % micro == 0
    planned = tiers.TARGETS["balanced"] - tiers.ESTIMATE_MARGIN
    larger_divisors = [d for d in range(micro + 1, 769) if 768 % d == 0]
    assert all(
        not make(attrs.evolve(spec, runtime=attrs.evolve(spec.runtime, micro_batch_size=d))).fits(
            planned
        )
        for d in larger_divisors
    )


def test_under_torchrun_the_micro_batch_divides_this_ranks_rows(monkeypatch):
    torchrun_env(monkeypatch, rank=0, world=4)  # 768 / 4 = 192 rows per rank
    per_row = 40 * 2**20  # room for about 143 rows: 192's largest fitting divisor is 96
    make = divisor_estimate(8 * GIB, per_row)
    spec = spec_of(768)
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    assert adapted.runtime.micro_batch_size == 96
    assert "this process's 192 rows" in changes[-1].reason


def test_bf16_is_decided_by_this_ranks_gpu(monkeypatch):
    gpus = (AcceleratorInfo("cuda", 0, bf16=False), AcceleratorInfo("cuda", 1, bf16=True))
    hardware = HardwareProfile(accelerators=gpus)
    estimate = MemoryEstimate(items=(), device_budget_bytes=8 * GIB)
    torchrun_env(monkeypatch, rank=1, world=2)
    assert tiers.native_bf16(hardware, estimate)
    torchrun_env(monkeypatch, rank=0, world=2)
    assert not tiers.native_bf16(hardware, estimate)
    torchrun_env(monkeypatch, rank=1, world=2)
    unknown = HardwareProfile(
        accelerators=(AcceleratorInfo("cuda", 0, bf16=True), AcceleratorInfo("cuda", 1))
    )
    assert not tiers.native_bf16(unknown, estimate)  # unknown support: fp32, never a guess


def test_rank_zero_counts_its_host_copy_of_a_background_checkpoint(monkeypatch):
    spec = load_spec(resolve_spec_path("arc-agi-1"))
    torchrun_env(monkeypatch, rank=0, world=4)
    snapshot = items_of(spec, ARC, world=4)["checkpoint snapshot"]
    assert snapshot.location == "host" and snapshot.bytes > 1.7e9  # the puzzle table at least
    torchrun_env(monkeypatch, rank=1, world=4)
    assert "checkpoint snapshot" not in items_of(spec, ARC, world=4)
