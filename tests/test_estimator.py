"""The built-in memory estimator: exact against autograd, and the trm.testing properties."""

from __future__ import annotations

import contextlib
import ctypes
import math
import sys
import types

import attrs
import pytest
import torch

from trm import hookimpl
from trm.data.shape import DatasetShape
from trm.device.contract import DeviceBackend
from trm.hardware import HardwareProfile
from trm.memory import MemoryItem
from trm.model.trm import TinyRecursiveModel
from trm.plugins.backends.cuda import CUDA
from trm.plugins.planning import memory_estimator
from trm.runtime import RuntimeChoice
from trm.spec import ArchSpec, RunSpec, TrainSpec
from trm.testing import check_memory_estimator

SUDOKU = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
MAZE = DatasetShape(seq_len=900, vocab_size=6, num_puzzle_identifiers=1)  # 30x30 grids


def saved_bytes_per_sample(
    arch: ArchSpec,
    precision: str,
    compiled: bool = False,
    shape: DatasetShape = SUDOKU,
    position_major: bool | None = None,
) -> float:
    """Bytes autograd keeps per extra sample for one training forward of the real model
    (with ``compiled``, its network compiled by torch.compile as ``trm run`` does; in the
    MLP variant's ``position_major`` layout, None: the model's default)."""

    def saved(batch: int) -> int:
        torch.manual_seed(0)
        model = TinyRecursiveModel(
            arch, shape.seq_len, shape.vocab_size, 1, position_major=position_major
        ).train()
        if compiled:
            # what earlier tests of this process compiled (their guards, recompile counts)
            # must not decide how this network compiles
            torch._dynamo.reset()
            model.region.compile(dynamic=False)  # as compile_network, static shapes
        data = {
            "inputs": torch.randint(1, 6, (batch, shape.seq_len)),
            "labels": torch.randint(2, 6, (batch, shape.seq_len)),
            "puzzle_identifiers": torch.zeros(batch, dtype=torch.long),
        }
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        cast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if precision == "bf16"
            else contextlib.nullcontext()
        )
        with cast, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(model.initial_carry(data), data)
        return sum(storages.values())

    return (saved(6) - saved(2)) / 4


@pytest.mark.parametrize(
    "overrides",
    [
        {"mlp_t": True, "pos_encodings": "none"},
        {"mlp_t": False, "pos_encodings": "rope"},
        {"mlp_t": False, "pos_encodings": "learned", "L_layers": 1},
    ],
    ids=["mlp_t", "attention-rope", "attention-learned"],
)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_activation_count_matches_what_autograd_saves_within_3_percent(overrides, precision):
    arch = ArchSpec(
        hidden_size=64, num_heads=4, L_cycles=2, puzzle_emb_ndim=0, puzzle_emb_len=2, **overrides
    )
    sizes = memory_estimator.model_sizes(arch, SUDOKU)
    predicted = memory_estimator.step_activation_bytes(arch, sizes, precision)
    measured = saved_bytes_per_sample(arch, precision)
    assert predicted == pytest.approx(measured, rel=0.03)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_attention_at_seq_len_900_keeps_no_score_matrix(precision):
    """At 900 positions a [B, heads, P, P] score matrix would be 15x the rest of a call; the
    fused attention keeps only q, k, v, its output and the log-sum-exp, as counted."""
    arch = ArchSpec(
        hidden_size=64, num_heads=4, H_cycles=1, L_cycles=1, puzzle_emb_ndim=0, puzzle_emb_len=1
    )
    sizes = memory_estimator.model_sizes(arch, MAZE)
    predicted = memory_estimator.step_activation_bytes(arch, sizes, precision)
    measured = saved_bytes_per_sample(arch, precision, shape=MAZE)
    assert predicted == pytest.approx(measured, rel=0.03)
    scores_per_call = arch.L_layers * 4 * arch.num_heads * sizes.positions**2  # float32
    assert measured < (arch.L_cycles + 1) * scores_per_call


def maze_step_items(micro: int, global_batch: int, compiled: bool) -> dict[str, int]:
    """The estimator's items for specs/maze-hard-att.toml's network at seq_len 900 (bf16,
    host memory reused, as on a CPU with native bf16 and glibc)."""
    arch = ArchSpec(hidden_size=512, num_heads=8, L_layers=2, H_cycles=3, L_cycles=4)
    spec = RunSpec(arch=arch, train=TrainSpec(global_batch_size=global_batch))
    spec = attrs.evolve(spec, runtime=attrs.evolve(spec.runtime, micro_batch_size=micro))
    runtime = RuntimeChoice("cpu", "bf16", 2, compiled, reuse_host_memory=True)
    items = memory_estimator.estimate_items(
        spec, HardwareProfile(), runtime, MAZE, process_baseline_bytes=0
    )
    return {item.name: item.bytes for item in items}


@pytest.mark.parametrize(("compiled", "full_growth"), [(True, 0.5), (False, 1.0)])
def test_maze_heap_slack_grows_over_the_first_micro_batches_of_a_step(compiled, full_growth):
    """Pins the heap-slack arithmetic at seq_len 900: the attention+rope bf16 share of one
    micro-batch (0.55, the same for tensors under and over 32 MiB when memory is reused),
    grown with log2 of the step's micro-batches up to its full growth from 4 on."""

    def share(micro: int, global_batch: int) -> float:
        items = maze_step_items(micro, global_batch, compiled)
        return items["allocator fragmentation"] / items["activations"]

    assert share(8, 8) == pytest.approx(0.55, abs=1e-6)
    assert share(8, 16) == pytest.approx(0.55 * (1 + full_growth / 2), abs=1e-6)
    assert share(8, 24) == pytest.approx(0.55 * (1 + full_growth * math.log2(3) / 2), abs=1e-6)
    full = 0.55 * (1 + full_growth)
    assert share(8, 32) == share(43, 768) == share(2, 512) == pytest.approx(full, abs=1e-6)


def test_maze_step_at_micro_batch_43_of_768_counts_the_carry_and_activations():
    """The items of the paper's Maze step that the lead measured (specs/maze-hard-att.toml,
    micro-batch 43 of 768, compiled bf16): float32 carry of all 768 rows of 916 x 512,
    5 grad-carrying calls of 2 layers at 43 rows, and their new bf16 carry rows."""
    items = maze_step_items(43, 768, compiled=True)
    positions, hidden = 916, 512
    assert items["carry (z_H, z_L)"] == 768 * (2 * 4 * positions * hidden + 4 + 1 + 900 * 16 + 8)
    arch = ArchSpec(hidden_size=512, num_heads=8, L_layers=2, H_cycles=3, L_cycles=4)
    sizes = memory_estimator.model_sizes(arch, MAZE)
    per_call = memory_estimator.net_call_bytes(arch, sizes, "bf16", compiled=True)
    assert items["activations"] == 43 * 5 * per_call
    assert 7.0 * 2**30 < items["activations"] < 7.3 * 2**30


def test_weights_item_counts_the_real_parameters():
    spec = RunSpec(arch=ArchSpec(hidden_size=64, num_heads=4, puzzle_emb_ndim=64))
    model = TinyRecursiveModel(spec.arch, 16, 6, 10)
    items = memory_estimator.estimate_items(
        spec,
        HardwareProfile(),
        RuntimeChoice("cpu", "fp32", 1, False),
        DatasetShape(16, 6, 10),
        process_baseline_bytes=0,
    )
    by_name = {item.name: item.bytes for item in items}
    assert by_name["gradients"] == 4 * model.count_parameters()
    assert by_name["puzzle embedding table"] == 4 * model.puzzle_embedding_numel()


class TwoDevices(DeviceBackend):
    """A backend that splits each batch over two devices, as XLA's SPMD does."""

    def replicas(self) -> int:
        return 2


def test_a_backend_splitting_the_batch_over_devices_counts_the_replicated_state_on_each():
    spec = RunSpec(
        arch=ArchSpec(hidden_size=64, num_heads=4, puzzle_emb_ndim=64),
        train=TrainSpec(global_batch_size=8, ema=True),
    )

    def items(backend: DeviceBackend) -> dict[str, int]:
        runtime = RuntimeChoice("cpu", "fp32", 1, False, backend=backend)
        found = memory_estimator.estimate_items(
            spec, HardwareProfile(), runtime, DatasetShape(16, 6, 10), process_baseline_bytes=0
        )
        return {item.name: item.bytes for item in found}

    one, two = items(DeviceBackend()), items(TwoDevices())
    for name in ("weights", "gradients", "optimizer states", "EMA copy", "puzzle embedding table"):
        assert one[name] > 0 and two[name] == 2 * one[name], name
    for name in ("activations", "carry (z_H, z_L)", "step transients"):  # the rows are split
        assert two[name] == one[name], name


def test_host_memory_reuse_adds_heap_slack_only_where_tensors_were_mapped():
    """With reuse every tensor stays on glibc's heap, so activations in tensors of 32 MiB or
    more get the full heap-slack allowance instead of the smaller one for mapped tensors."""

    def fragmentation(batch: int, reuse: bool) -> int:
        spec = RunSpec(
            arch=ArchSpec(hidden_size=512, mlp_t=True), train=TrainSpec(global_batch_size=batch)
        )
        runtime = RuntimeChoice("cpu", "bf16", 2, True, reuse_host_memory=reuse)
        items = memory_estimator.estimate_items(
            spec, HardwareProfile(), runtime, DatasetShape(81, 11, 1), process_baseline_bytes=0
        )
        return {item.name: item.bytes for item in items}["allocator fragmentation"]

    assert fragmentation(2, reuse=True) == fragmentation(2, reuse=False)  # all tensors small
    assert fragmentation(96, reuse=True) > 1.5 * fragmentation(96, reuse=False)


def test_checkpointing_keeps_fewer_activations_than_storing_them():
    arch = ArchSpec(hidden_size=128, num_heads=4, L_cycles=4)
    sizes = memory_estimator.model_sizes(arch, SUDOKU)
    with_ckpt = memory_estimator.step_activation_bytes(arch, sizes, "fp32", checkpointing=True)
    assert with_ckpt < memory_estimator.step_activation_bytes(arch, sizes, "fp32")


def live_heap_bytes() -> int:
    """Bytes glibc's malloc has handed out and not had back (heap and mapped chunks)."""
    libc = ctypes.CDLL("libc.so.6")

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def kept_bytes_per_sample(arch: ArchSpec, precision: str, checkpointing: bool) -> float:
    """Memory one training forward of the real model leaves allocated until backward, per
    extra sample (everything the graph and the outputs hold, measured with glibc's count)."""
    torch.manual_seed(0)
    model = TinyRecursiveModel(arch, SUDOKU.seq_len, SUDOKU.vocab_size, 1).train()
    model.set_activation_checkpointing(checkpointing)

    def kept(batch: int) -> int:
        data = {
            "inputs": torch.randint(1, 6, (batch, SUDOKU.seq_len)),
            "labels": torch.randint(2, 6, (batch, SUDOKU.seq_len)),
            "puzzle_identifiers": torch.zeros(batch, dtype=torch.long),
        }
        carry = model.initial_carry(data)
        cast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if precision == "bf16"
            else contextlib.nullcontext()
        )
        before = live_heap_bytes()
        with cast:
            outputs = model(carry, data)
        grown = live_heap_bytes() - before
        del outputs
        return grown

    kept(2), kept(6)  # warm up: caches, the RoPE table
    return (kept(6) - kept(2)) / 4


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2"),
    reason="counts allocations with glibc's mallinfo2",
)
@pytest.mark.parametrize(
    "overrides",
    [{"mlp_t": True, "pos_encodings": "none"}, {"mlp_t": False, "pos_encodings": "rope"}],
    ids=["mlp_t", "attention-rope"],
)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_checkpointing_frees_what_the_estimate_says_within_3_percent(overrides, precision):
    """Off minus on, measured as the memory a forward leaves allocated, is what the estimator
    drops from its activations item: every call's saved tensors less the calls' inputs."""
    arch = ArchSpec(
        hidden_size=64, num_heads=4, L_cycles=3, puzzle_emb_ndim=0, puzzle_emb_len=2, **overrides
    )
    sizes = memory_estimator.model_sizes(arch, SUDOKU)
    predicted = memory_estimator.kept_activation_bytes(
        arch, sizes, precision
    ) - memory_estimator.kept_activation_bytes(arch, sizes, precision, checkpointing=True)
    measured = kept_bytes_per_sample(arch, precision, False) - kept_bytes_per_sample(
        arch, precision, True
    )
    assert predicted == pytest.approx(measured, rel=0.03)
    kept_on = memory_estimator.checkpoint_input_bytes(arch, sizes, precision)
    assert kept_on < 0.05 * memory_estimator.kept_activation_bytes(arch, sizes, precision)


def test_checkpointing_splits_activations_into_inputs_and_one_recomputed_call():
    spec = RunSpec(arch=ArchSpec(hidden_size=64, num_heads=4, L_cycles=3))

    def items(setting: str) -> dict[str, int]:
        runtime = attrs.evolve(spec.runtime, activation_checkpointing=setting, micro_batch_size=8)
        found = memory_estimator.estimate_items(
            attrs.evolve(spec, runtime=runtime),
            HardwareProfile(),
            RuntimeChoice("cpu", "fp32", 1, False),
            SUDOKU,
            process_baseline_bytes=0,
        )
        return {item.name: item.bytes for item in found}

    off, on, auto = items("off"), items("on"), items("auto")
    sizes = memory_estimator.model_sizes(spec.arch, SUDOKU)
    per_call = memory_estimator.net_call_bytes(spec.arch, sizes, "fp32")
    assert off["activations"] == 8 * 4 * per_call and "recomputed call" not in off
    backward = memory_estimator.recompute_backward_bytes(spec.arch, sizes, "fp32", True)
    share = memory_estimator.RECOMPUTE_BACKWARD_SHARE["attention"]
    assert backward == int(share * per_call)  # 4 calls: far below what checkpointing frees
    assert on["recomputed call"] == 8 * (per_call + backward)
    inputs = memory_estimator.checkpoint_input_bytes(spec.arch, sizes, "fp32")
    assert on["activations"] == 8 * inputs
    assert auto == off  # auto is planned without it; the tier writes "on" where it chooses it
    assert sum(on.values()) < sum(off.values())


def test_cuda_runs_put_model_items_on_the_device_and_add_the_context():
    spec = RunSpec(train=TrainSpec(global_batch_size=8))
    items = memory_estimator.estimate_items(
        spec, HardwareProfile(), RuntimeChoice("cuda", "bf16", 1, False, backend=CUDA), SUDOKU, 0
    )
    where = {item.name: item.location for item in items}
    assert where["activations"] == "device" and where["data-loader buffers"] == "host"
    assert "CUDA context" in where


def test_the_built_in_estimator_has_every_trm_testing_property():
    skipped = check_memory_estimator(memory_estimator, max_examples=10)
    assert skipped == []


def test_the_kit_catches_an_estimator_whose_bf16_exceeds_fp32():
    broken = types.ModuleType("broken")

    @hookimpl
    def estimate_memory(spec, runtime):
        per_row = 2**20 if runtime.precision == "fp32" else 2**30  # bf16 above fp32: wrong
        return [MemoryItem("activations", per_row * spec.train.global_batch_size)]

    broken.estimate_memory = estimate_memory
    with pytest.raises(AssertionError):
        check_memory_estimator(
            broken, max_examples=10, properties=("bf16_never_above_fp32",), shrink=False
        )


def test_the_kit_rejects_negative_items():
    def estimate_memory(spec):
        return [MemoryItem("refund", -1)]

    with pytest.raises(AssertionError):
        check_memory_estimator(
            estimate_memory,
            max_examples=5,
            properties=("items_are_valid_and_sum_to_the_total",),
            shrink=False,
        )


def test_a_smaller_attention_variant_also_satisfies_sizes_monotonicity():
    arch = ArchSpec(hidden_size=64, num_heads=4, puzzle_emb_ndim=0, puzzle_emb_len=1)
    small = memory_estimator.model_sizes(arch, SUDOKU)
    big = memory_estimator.model_sizes(attrs.evolve(arch, hidden_size=128), SUDOKU)
    assert big.params > small.params


@pytest.mark.parametrize(
    ("overrides", "position_major"),
    [
        ({"mlp_t": True, "pos_encodings": "none"}, True),
        ({"mlp_t": True, "pos_encodings": "none"}, False),  # the CPU's compiled layout
        ({"mlp_t": False, "pos_encodings": "rope"}, None),
    ],
    ids=["mlp_t-position-major", "mlp_t-token-major", "attention-rope"],
)
@pytest.mark.slow
def test_compiled_activation_count_matches_what_inductor_saves(overrides, position_major):
    # H_cycles 2: one cycle without grad in the compiled region, as deep runs have, at two
    # thirds of the default's unrolled graph (what is saved does not depend on H_cycles)
    arch = ArchSpec(
        hidden_size=64,
        num_heads=4,
        H_cycles=2,
        L_cycles=2,
        puzzle_emb_ndim=0,
        puzzle_emb_len=2,
        **overrides,
    )
    sizes = memory_estimator.model_sizes(arch, SUDOKU)
    predicted = memory_estimator.step_activation_bytes(arch, sizes, "bf16", compiled=True)
    measured = saved_bytes_per_sample(arch, "bf16", compiled=True, position_major=position_major)
    assert predicted == pytest.approx(measured, rel=0.03)
    assert predicted < memory_estimator.step_activation_bytes(arch, sizes, "bf16")
