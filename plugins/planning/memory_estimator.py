"""Predict the peak memory of a TRM training step, item by item, from the model's tensors.

The count follows what ``trm.model`` really keeps (verified against autograd's saved tensors
in tests/test_estimator.py). One optimizer step runs, for each micro-batch of B rows, one
supervision step: ``H_cycles - 1`` cycles without grad, then one cycle of ``L_cycles + 1``
network calls whose activations autograd keeps until backward. The peak is at the start of
backward of the last micro-batch in a step after the first (optimizer states exist by then):

    persistent  weights, gradients, optimizer states, EMA copy, puzzle table and its sparse
                buffers, the global carry (z_H, z_L) and the step's batch, data-loader arrays
    activations what the L_cycles + 1 grad-carrying calls keep (per block: the input of the
                first product, the fused projection, SiLU and product outputs, the residual
                sum the RMS norm keeps; attention adds q/k/v, output and log-sum-exp: its
                fused kernels keep no P x P scores, so a local window
                (``arch.attention_window``) adds only its P x P masks, built once)
    transient   the new carry rows, head and loss buffers (the float64 stable-max), the
                gradient buffers of the first block backward reaches; the no-grad cycles'
                working set where it is larger
    allocator   tensors in host memory: torch's CPU runtime pages and glibc heap slack (a
                measured share of the activations, larger for a step of several
                micro-batches); tensors in a device's own memory: what that backend's
                runtime and allocator add (``DeviceBackend.allocator_items``, given the
                step's tensors as a ``StepMemory``; no CPU/glibc allowance applies there)

Shapes: P positions (puzzle prefix + seq_len), D hidden, I_h / I_t the SwiGLU inner widths of
the hidden MLP and of the MLP across positions (mlp_t). ``low`` is 2 bytes under bf16/fp16
autocast, else 4. Activation checkpointing (``runtime.activation_checkpointing = "on"``;
"auto" is planned as off, since the tiers plugin writes "on" where it chooses it) keeps only
each grad-carrying call's inputs ("activations") and recomputes one call at a time during
backward ("recomputed call": that call's saved tensors and the gradient temporaries of its
backward, the peak's extra).
"""

from __future__ import annotations

import functools
import math
import os

import psutil
import torch
from attrs import frozen

from trm import hookimpl
from trm.data.reader import ReaderChoice, choose_reader, reader_buffer_bytes
from trm.data.shape import DatasetShape
from trm.device.distributed import env_world
from trm.hardware import HardwareProfile, format_bytes
from trm.memory import MemoryItem, StepMemory
from trm.model import BUILT_IN_OPTIMIZERS, DenseOptimizer, choose_dense_optimizer
from trm.model.layers import swiglu_inner_width
from trm.model.trm import puzzle_prefix_len
from trm.runtime import RuntimeChoice
from trm.spec import ArchSpec, RunSpec

ACTIVATION = "default"

F32 = 4
F64 = 8
I64 = 8
MIB = 2**20

# Torch's CPU runtime holds memory no tensor accounts for once a training step has run:
# kernel code pages, OpenMP thread stacks, oneDNN and MKL state (about 64 MiB resident outside
# malloc plus about 24 MiB inside it; measured as RSS growth minus live tensor bytes for a
# batch-1, hidden-64 step, Linux x86-64, torch 2.x, by benchmarks/memory_accuracy.py).
CPU_RUNTIME_BYTES = 88 * MIB
# glibc keeps freed heap chunks resident (holes between live tensors, other threads' arenas),
# so the resident peak exceeds the live tensor bytes by a share of the activations that
# depends on how many short-lived tensors a block makes: attention with RoPE and bf16
# (casts) make more. Basis: RSS peak minus malloc-live peak, measured per block type and
# precision by benchmarks/memory_accuracy.py on Linux/glibc 2.36 (an empirical allowance, not
# derived from the model; other allocators differ).
HEAP_SLACK_FRACTION = {
    ("mlp_t", "fp32"): 0.17,
    ("mlp_t", "low"): 0.24,
    ("attention", "fp32"): 0.35,
    ("attention", "low"): 0.30,
    ("attention+rope", "fp32"): 0.35,
    ("attention+rope", "low"): 0.55,
}
# Compiled runs where the share differs from the eager one: Inductor fuses the float32 RoPE
# and norm temporaries of an fp32 attention block away (measured 0.26 and 0.31, Sudoku and
# Maze shapes, by benchmarks/memory_accuracy.py).
COMPILED_HEAP_SLACK_FRACTION = {("attention+rope", "fp32"): 0.25}
# glibc serves an allocation of at least this size (its largest dynamic mmap threshold on
# 64-bit) with its own mapping, returned to the system on free: such tensors leave no heap
# holes. The allowance for activations held in them is smaller (LARGE_TENSOR_SLACK: what the
# step's uncounted transients add; measured with micro-batches 96 and 192 of the Sudoku MLP
# recipe, compiled, bf16, by benchmarks/memory_accuracy.py and benchmarks/tier_fit.py).
# Eager autograd also holds gradient temporaries the size of the large products' outputs
# (gate/up gradients, the SiLU backward) next to the kept activations, which Inductor fuses
# away: EAGER_LARGE_TENSOR_SLACK, measured on the eager fp32 rows of memory_accuracy.py
# whose activations are mostly large tensors (hidden 64 x micro 512, hidden 512 x micro
# 32-64) on a Zen 3 EPYC, where 0.07 under-predicted them by 5-10%.
MMAP_THRESHOLD_MAX = 32 * MIB
LARGE_TENSOR_SLACK = 0.07
EAGER_LARGE_TENSOR_SLACK = 0.18
# With host-memory reuse (trm.device.host_memory) large tensors stay on the heap and leave holes
# like small ones: they get the block type's heap-slack fraction, except in compiled
# low-precision runs, whose large blocks fragment more: 0.36, measured by
# benchmarks/tier_fit.py on the Sudoku MLP recipe (micro-batches 177 and 289, bf16,
# compiled: 0.37 and 0.34 needed) on a 2-core Xeon with glibc 2.36.
REUSE_COMPILED_LOW_LARGE_TENSOR_SLACK = 0.36
# A step of several micro-batches leaves the heap larger than a step of one micro-batch of the
# same size: every micro-batch allocates and frees the same tensors again, glibc does not put
# them back where the previous one had them, and the slack grows over the first few
# micro-batches, then levels off. Measured by benchmarks/memory_accuracy.py (2 optimizer
# steps; slack as a share of the activations, for 1 -> 4 -> 8-24 micro-batches a step):
# compiled, Maze network bf16 micro-batch 4 at seq_len 900 0.57 -> 0.68 -> 0.71 (12) and
# 0.83 (24), Sudoku attention bf16 0.57 -> 0.80 -> 0.93 (8) and 0.82 (16), Sudoku MLP bf16
# 0.26 -> 0.30-0.40 -> 0.45 (16); eager, whose every elementwise op allocates, Sudoku
# attention bf16 0.57 -> 0.92 -> 0.86 (16), Maze bf16 0.55 -> 1.05 (micro-batch 2) and 1.09
# (8, of 3), Maze fp32 0.45 -> 0.82. Counted as a share of the one-micro-batch slack that
# ramps up with log2 of the step's micro-batches and is full from 4 on: compiled +50%, eager
# +100%. A real run agrees: trm run of specs/maze-hard-att.toml at micro-batch 8 of 128 (16
# a step, compiled bf16) peaked at 3.53 GiB resident, predicted 3.71 GiB.
MICRO_BATCH_HEAP_GROWTH = {"compiled": 0.5, "eager": 1.0}
MICRO_BATCHES_FOR_FULL_GROWTH = 4
# Activation checkpointing: backward reruns one grad-carrying call at a time and then goes
# back through it, so beyond that call's saved tensors it holds the gradient temporaries of
# the call's backward, which without checkpointing fall inside the larger peak at the start
# of backward (and so inside the heap-slack shares above). Measured as a share of the call's
# saved tensors, per block type, by benchmarks/activation_checkpointing.py (whole-process
# peak RSS, eager float32, micro-batches 1 and 2 of the Maze-Hard network at seq_len 900 and
# 2 and 8 of the Sudoku MLP network, on a 2-core Zen 3 EPYC): attention 1.6 (1.75 and 1.52
# needed), MLP across positions 1.3 (2.0 and 1.1 needed). Never more than what checkpointing
# frees (the same temporaries come at the start of a backward without it), so the estimate
# with it never exceeds the one without.
RECOMPUTE_BACKWARD_SHARE = {"mlp_t": 1.3, "attention": 1.6}


@frozen
class Sizes:
    """Element counts of one sample's tensors and the model's parameter counts."""

    positions: int
    hidden: int
    seq_len: int
    vocab: int
    heads: int
    inner_hidden: int  # I_h
    inner_tokens: int  # I_t (mlp_t only)
    net_params: int
    other_params: int
    buffers_persistent: int  # float buffers in state_dict (H_init, L_init, puzzle table)
    buffers_other: int  # non-persistent buffers (RoPE tables)
    puzzle_table: int
    puzzle_ndim: int
    # (name, shape) of every trainable parameter, for an optimizer's state by parameter kind
    param_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def params(self) -> int:
        return self.net_params + self.other_params


def model_sizes(arch: ArchSpec, dataset: DatasetShape) -> Sizes:
    """Parameter and buffer counts of the real model, built on the meta device (no memory)."""
    from trm.model import TinyRecursiveModel

    with torch.device("meta"):
        model = TinyRecursiveModel(
            arch, dataset.seq_len, dataset.vocab_size, max(1, dataset.num_puzzle_identifiers)
        )
    net_params = sum(p.numel() for p in model.net.parameters())
    all_params = sum(p.numel() for p in model.parameters())
    persistent = model.state_dict()
    params_names = {name for name, _ in model.named_parameters()}
    buffers_persistent = sum(
        t.numel()
        for name, t in persistent.items()
        if name not in params_names and t.is_floating_point()
    )
    buffers_all = sum(b.numel() for b in model.buffers())
    prefix = puzzle_prefix_len(arch)
    return Sizes(
        positions=prefix + dataset.seq_len,
        hidden=arch.hidden_size,
        seq_len=dataset.seq_len,
        vocab=dataset.vocab_size,
        heads=arch.num_heads,
        inner_hidden=swiglu_inner_width(arch.hidden_size, arch.expansion),
        inner_tokens=swiglu_inner_width(prefix + dataset.seq_len, arch.expansion),
        net_params=net_params,
        other_params=all_params - net_params,
        buffers_persistent=buffers_persistent,
        buffers_other=buffers_all - buffers_persistent,
        puzzle_table=model.puzzle_embedding_numel(),
        puzzle_ndim=arch.puzzle_emb_ndim,
        param_shapes=tuple(
            (name, tuple(p.shape)) for name, p in model.named_parameters() if p.requires_grad
        ),
    )


@functools.cache
def process_rss_bytes() -> int:
    """This process's resident size, read once (so estimates in one process agree)."""
    return psutil.Process(os.getpid()).memory_info().rss


def low_bytes(precision: str) -> int:
    """Bytes of an autocast-dtype element: 2 for bf16/fp16, 4 for fp32."""
    return 2 if precision in ("bf16", "fp16") else F32


def block_tensors(
    arch: ArchSpec, s: Sizes, precision: str, compiled: bool = False
) -> dict[str, list[int]]:
    """Bytes per sample that one layer keeps for backward, as {block: [tensor bytes, ...]}.

    Eager: the first product of each block keeps its input (the float32 tensor itself
    without autocast, its autocast-dtype copy with it) and the RMS norm keeps its float32
    residual sum. Compiled (Inductor): the partitioner keeps every block's tensors in the
    autocast dtype (norms are recomputed from their inputs and float32 statistics), and the
    block's output as well. Each list lists distinct storages; both layouts are checked
    against the tensors autograd really saves in tests/test_estimator.py.
    """
    low = low_bytes(precision)
    first_input = F32 if low == F32 else low
    p, d = s.positions, s.hidden
    pd = p * d
    i_h = s.inner_hidden
    blocks: dict[str, list[int]] = {}
    if compiled:
        if arch.mlp_t:
            i_t = s.inner_tokens
            # input, fused gate/up [2 I_t, D], SiLU(gate) * up, output, per-column statistics
            blocks["token_mlp"] = [pd * low, 2 * i_t * d * low, i_t * d * low, pd * low, F32 * d]
        else:
            attention = [pd * low, 3 * pd * low]  # input, fused qkv
            if arch.pos_encodings == "rope":
                attention += [pd * low, pd * low]  # rotated q and k
            # attention output, its projection, log-sum-exp, the norm's statistics
            attention += [pd * low, pd * low, F32 * s.heads * p, F32 * p]
            blocks["attention"] = attention
        # normed input, fused gate/up [P, 2 I_h], SiLU(gate) * up, output, statistics
        blocks["mlp"] = [pd * low, 2 * i_h * p * low, i_h * p * low, pd * low, F32 * p]
        return blocks
    swiglu_h = [2 * i_h * p * low, i_h * p * low, i_h * p * low]
    if arch.mlp_t:
        i_t = s.inner_tokens
        blocks["token_mlp"] = [
            first_input * pd,
            2 * i_t * d * low,  # fused gate/up projection [2 I_t, D]
            i_t * d * low,  # SiLU(gate)
            i_t * d * low,  # SiLU(gate) * up
            F32 * pd,  # residual sum kept by the RMS norm
            F32 * d,  # its reciprocal RMS (one per column)
        ]
    else:
        attention = [first_input * pd, 3 * pd * low]  # input, fused qkv
        if arch.pos_encodings == "rope":
            attention += [pd * low, pd * low]  # rotated q and k
        attention += [pd * low, F32 * s.heads * p, F32 * pd, F32 * p]  # out, lse, sum, rsqrt
        blocks["attention"] = attention
    blocks["mlp"] = [first_input * pd, *swiglu_h, F32 * pd, F32 * p]
    return blocks


def net_call_bytes(arch: ArchSpec, s: Sizes, precision: str, compiled: bool = False) -> int:
    """Bytes per sample that one grad-carrying call of the network keeps for backward."""
    per_layer = sum(sum(t) for t in block_tensors(arch, s, precision, compiled).values())
    return arch.L_layers * per_layer


def checkpoint_input_bytes(arch: ArchSpec, s: Sizes, precision: str) -> int:
    """Per sample: what the grad-carrying cycle keeps with activation checkpointing on — the
    inputs of its ``L_cycles + 1`` checkpointed calls, in the states' dtype (the autocast
    dtype, else float32): z_L before each L call and each call's injection z_H + x, then z_H
    for the H call (its injection, the last z_L, is the new carry's z_L in the token-major
    layout; the position-major MLP variant copies the carry back, so it counts one more).
    Checked against the memory a forward really keeps in tests/test_estimator.py."""
    kept = 2 * arch.L_cycles + (2 if arch.mlp_t else 1)
    return kept * low_bytes(precision) * s.positions * s.hidden


def kept_activation_bytes(
    arch: ArchSpec, s: Sizes, precision: str, checkpointing: bool = False, compiled: bool = False
) -> int:
    """Per sample: what the gradient-carrying cycle keeps from its forward until backward:
    every one of its L_cycles + 1 network calls' saved tensors, or with checkpointing only
    their inputs (:func:`checkpoint_input_bytes`)."""
    if checkpointing:
        return checkpoint_input_bytes(arch, s, precision)
    return (arch.L_cycles + 1) * net_call_bytes(arch, s, precision, compiled)


def recompute_bytes(
    arch: ArchSpec, s: Sizes, precision: str, checkpointing: bool = False, compiled: bool = False
) -> int:
    """Per sample: what backward holds at its peak beyond the kept activations — with
    checkpointing, the one call it runs again at a time (its saved tensors, as a kept call's);
    without, nothing."""
    return net_call_bytes(arch, s, precision, compiled) if checkpointing else 0


def recompute_backward_bytes(
    arch: ArchSpec, s: Sizes, precision: str, checkpointing: bool = False, compiled: bool = False
) -> int:
    """Per sample, with checkpointing: the gradient temporaries of the recomputed call's
    backward (a measured share of its saved tensors, ``RECOMPUTE_BACKWARD_SHARE``), at most
    what checkpointing frees beyond that call."""
    if not checkpointing:
        return 0
    share = RECOMPUTE_BACKWARD_SHARE["mlp_t" if arch.mlp_t else "attention"]
    per_call = recompute_bytes(arch, s, precision, checkpointing, compiled)
    freed = kept_activation_bytes(arch, s, precision, False, compiled) - per_call
    freed -= kept_activation_bytes(arch, s, precision, True, compiled)
    return max(0, min(int(share * per_call), freed))


def step_activation_bytes(
    arch: ArchSpec, s: Sizes, precision: str, checkpointing: bool = False, compiled: bool = False
) -> int:
    """Per sample: the grad-carrying cycle's activations at the step's peak — the kept
    activations, plus the recomputed call with checkpointing."""
    return kept_activation_bytes(arch, s, precision, checkpointing, compiled) + recompute_bytes(
        arch, s, precision, checkpointing, compiled
    )


def nograd_working_bytes(arch: ArchSpec, s: Sizes, precision: str) -> int:
    """Per sample: the largest set of temporaries one no-grad network call holds at once."""
    low = low_bytes(precision)
    pd = s.positions * s.hidden
    hidden_mlp = 4 * s.inner_hidden * s.positions * low + pd * low
    if arch.mlp_t:
        mixing = 4 * s.inner_tokens * s.hidden * low + pd * low
    else:
        mixing = 3 * pd * low + 2 * pd * low + pd * low + F32 * s.heads * s.positions
    # h, the injection sum and the residual sum next to the block's own temporaries
    return max(hidden_mlp, mixing) + 3 * F32 * pd


def backward_working_bytes(arch: ArchSpec, s: Sizes, precision: str) -> int:
    """Per sample: gradient buffers of the first block backward reaches (the last SwiGLU)."""
    low = low_bytes(precision)
    pd = s.positions * s.hidden
    return 2 * s.inner_hidden * s.positions * low + 2 * F32 * pd


def head_and_loss_bytes(s: Sizes, precision: str) -> int:
    """Per sample: LM-head input copy and logits, the float64 stable-max and its temporaries."""
    low = low_bytes(precision)
    sv = s.seq_len * s.vocab
    head_input = s.seq_len * s.hidden * low if low != F32 else 0
    return head_input + sv * low + 7 * sv * F64 + s.seq_len * (I64 + 1)


def heap_slack_fraction(arch: ArchSpec, precision: str, compiled: bool = False) -> float:
    """The glibc heap-slack allowance for this block type and precision (see the constants)."""
    if arch.mlp_t:
        kind = "mlp_t"
    else:
        kind = "attention+rope" if arch.pos_encodings == "rope" else "attention"
    key = (kind, "fp32" if low_bytes(precision) == F32 else "low")
    if compiled and key in COMPILED_HEAP_SLACK_FRACTION:
        return COMPILED_HEAP_SLACK_FRACTION[key]
    return HEAP_SLACK_FRACTION[key]


def small_tensor_share(
    arch: ArchSpec, s: Sizes, precision: str, micro: int, compiled: bool
) -> float:
    """Share of the activation bytes held in tensors smaller than ``MMAP_THRESHOLD_MAX``."""
    sizes = [
        b * micro for block in block_tensors(arch, s, precision, compiled).values() for b in block
    ]
    total = sum(sizes)
    return sum(b for b in sizes if b < MMAP_THRESHOLD_MAX) / total if total else 1.0


def heap_slack_share(
    arch: ArchSpec, s: Sizes, precision: str, micro: int, rows: int, runtime: RuntimeChoice
) -> tuple[float, float]:
    """CPU: glibc's heap slack as a share of the activations, and the share of the
    activations held in tensors under ``MMAP_THRESHOLD_MAX`` (see the constants above): the
    slack of one micro-batch, grown for a step of several (``MICRO_BATCH_HEAP_GROWTH``) over
    this process's ``rows`` of the global batch."""
    small = small_tensor_share(arch, s, precision, micro, runtime.compile)
    block = heap_slack_fraction(arch, precision, runtime.compile)
    large = LARGE_TENSOR_SLACK if runtime.compile else EAGER_LARGE_TENSOR_SLACK
    if runtime.reuse_host_memory:  # large tensors stay on the heap too (trm.device.host_memory)
        compiled_low = runtime.compile and low_bytes(precision) != F32
        large = max(REUSE_COMPILED_LOW_LARGE_TENSOR_SLACK, block) if compiled_low else block
    one_micro_batch = small * block + (1 - small) * large
    micro_batches = -(-rows // micro)
    ramp = min(1.0, math.log2(micro_batches) / math.log2(MICRO_BATCHES_FOR_FULL_GROWTH))
    growth = MICRO_BATCH_HEAP_GROWTH["compiled" if runtime.compile else "eager"] * ramp
    return one_micro_batch * (1 + growth), small


def _dataset_bytes(
    spec: RunSpec, dataset: DatasetShape, hardware: HardwareProfile, rows: int, on_device: bool
) -> tuple[int, str]:
    """The data reader's host memory (trm.data.reader): the step's batch (``rows``: this
    process's rows of it) and the sampler's index always; the split itself when the memory
    reader holds it; with the stream reader its prefetched batches — its memory-mapped pages
    are page cache the OS reclaims."""
    seq, global_batch = dataset.seq_len, rows
    batch = global_batch * (2 * seq * I64 + I64)
    # the sampler's arrays of an epoch (a few per group); the split's own index arrays stay
    # memory-mapped (trm.data.sampler.SplitIndex)
    index = I64 * 6 * dataset.total_groups
    if spec.data.reader == "memory":
        choice = ReaderChoice("memory", "asked for", spec.data.prefetch_steps)
    else:
        choice = choose_reader(spec, dataset, hardware)
    if choice.name == "stream":
        buffers = reader_buffer_bytes(spec, dataset, choice)
        note = (
            f"stream reader: the batch of {global_batch} rows, {choice.prefetch_steps} "
            "prefetched batches and the sampler's index; the memory-mapped split is page "
            "cache the OS reclaims"
        )
        return batch + index + buffers, note
    if dataset.train_file_bytes:
        held, how = dataset.train_file_bytes, "the train split's inputs and labels"
    else:
        held, how = 2 * dataset.total_puzzles * seq * 4, "inputs/labels as int32 (size unknown)"
    sharing = env_world().local_size
    shared = ""
    if sharing > 1:  # page cache of the memory-mapped files, one copy per node
        held //= sharing
        shared = f" (a 1/{sharing} share: the node's {sharing} ranks share its page cache)"
    ahead = choice.prefetch_steps if on_device else 0  # trm.loop.setup.open_reader
    note = (
        f"memory reader: {how} in memory{shared}, the batch of {global_batch} rows (int64) "
        f"and {ahead} prefetched, the index"
    )
    return batch * (1 + ahead) + index + held, note


@frozen
class StepPlan:
    """What one process's training step is, as the estimate counts it: the model's sizes, the
    precision, this process's rows of the global batch and its micro-batch, and where the
    tensors live (``on_device``: in memory of the device's own)."""

    spec: RunSpec
    runtime: RuntimeChoice
    dataset: DatasetShape
    sizes: Sizes
    world: int
    rows: int
    micro: int
    checkpointing: bool
    on_device: bool
    # bytes of state the dense optimizer keeps per parameter element (its DenseOptimizer's)
    optimizer_state_bytes_per_element: int
    # bytes of state it keeps for all the parameters (DenseOptimizer.state_bytes_for)
    optimizer_state_bytes: int = 0
    # train.latent_candidates: every row runs this many reasoning states (activations x K)
    candidates: int = 1

    @property
    def arch(self) -> ArchSpec:
        return self.spec.arch

    @property
    def precision(self) -> str:
        return self.runtime.precision

    @property
    def global_batch(self) -> int:
        return self.spec.train.global_batch_size

    @property
    def replicas(self) -> int:
        """The devices the backend splits this process's rows over (``replicas()``: XLA's
        SPMD); each holds its own copy of the weights, gradients, optimizer states, EMA and
        puzzle table, while the rows' tensors are shared out."""
        return max(1, self.runtime.backend.replicas())

    @property
    def location(self) -> str:
        """Where the model's tensors are charged: "device" or "host"."""
        return "device" if self.on_device else "host"

    @property
    def micro_batches(self) -> int:
        """Micro-batches in one optimizer step of this process."""
        return -(-self.rows // self.micro)

    def carry_bytes(self, rows: int, state_bytes: int) -> int:
        """Bytes of a carry of ``rows`` rows whose z_H and z_L (one z_L per latent
        candidate) take ``state_bytes`` bytes an element, with its data (halted flag, steps,
        inputs and labels, puzzle identifier)."""
        pd = self.sizes.positions * self.sizes.hidden
        states = 1 + self.candidates
        return rows * (states * state_bytes * pd + 4 + 1 + self.dataset.seq_len * 2 * I64 + I64)


def plan_step(
    spec: RunSpec,
    runtime: RuntimeChoice,
    dataset: DatasetShape,
    world_size: int | None,
    optimizer: DenseOptimizer | None = None,
) -> StepPlan:
    """The step this process runs: under torchrun (``world_size``, default from its
    environment) only its rows of the global batch, in micro-batches at most that large,
    updated by ``optimizer`` (None: the built-in entry ``train.optimizer`` names)."""
    if optimizer is None:
        optimizer = choose_dense_optimizer(BUILT_IN_OPTIMIZERS, spec.train.optimizer)
    world = env_world().size if world_size is None else world_size
    rows = max(1, spec.train.global_batch_size // max(1, world))
    sizes = model_sizes(spec.arch, dataset)
    return StepPlan(
        spec=spec,
        runtime=runtime,
        dataset=dataset,
        sizes=sizes,
        world=world,
        rows=rows,
        micro=min(spec.runtime.micro_batch_size or rows, rows),
        checkpointing=spec.runtime.activation_checkpointing == "on",  # "auto": planned off
        on_device=runtime.backend.uses_device_memory(),
        optimizer_state_bytes_per_element=optimizer.state_bytes_per_element,
        optimizer_state_bytes=optimizer.state_bytes_for(sizes.param_shapes),
        candidates=spec.train.latent_candidates,
    )


@frozen
class StepTensors:
    """Bytes of the tensors a step makes and frees again every micro-batch: ``kept`` what the
    grad-carrying cycle keeps for backward, ``recomputed`` the call backward runs again with
    checkpointing and ``recompute_backward`` its gradient temporaries, ``transient`` the new
    carry rows, head, loss and first backward buffers, ``nograd`` the no-grad cycles' largest
    working set."""

    kept: int
    recomputed: int
    recompute_backward: int
    transient: int
    nograd: int

    @property
    def activations(self) -> int:
        """What the heap-slack and allocator shares apply to."""
        return self.kept + self.recomputed


def step_tensors(step: StepPlan) -> StepTensors:
    """The step's transient tensors (see :class:`StepTensors`); with K latent candidates
    every row runs K times, so the micro-batch's tensors are those of K x its rows."""
    arch, s, precision = step.arch, step.sizes, step.precision
    micro = step.micro * step.candidates
    compiled, checkpointing = step.runtime.compile, step.checkpointing
    # The loop keeps every micro-batch's new carry rows until the step ends (then writes them
    # back), so by the last micro-batch they cover all of this process's rows. z_H and z_L
    # come back from the recursion in the autocast dtype.
    new_carry = step.carry_bytes(step.rows, low_bytes(precision))
    per_row = head_and_loss_bytes(s, precision) + backward_working_bytes(arch, s, precision)
    return StepTensors(
        kept=micro * kept_activation_bytes(arch, s, precision, checkpointing, compiled),
        recomputed=micro * recompute_bytes(arch, s, precision, checkpointing, compiled),
        recompute_backward=micro
        * recompute_backward_bytes(arch, s, precision, checkpointing, compiled),
        transient=new_carry + micro * per_row,
        nograd=micro * nograd_working_bytes(arch, s, precision) if arch.H_cycles > 1 else 0,
    )


def _item(name: str, count: float, location: str, note: str) -> MemoryItem:
    return MemoryItem(name=name, bytes=max(0, int(count)), location=location, note=note)


def persistent_items(step: StepPlan) -> list[MemoryItem]:
    """What lives through the whole step: weights, gradients, optimizer states, the EMA copy,
    the puzzle table and its sparse buffers, autocast weight copies, the carry. The model's
    copies are counted once per device the backend splits the rows over
    (:attr:`StepPlan.replicas`); the rows' tensors once."""
    s, train, where, precision = step.sizes, step.spec.train, step.location, step.precision
    low = low_bytes(precision)
    copies = step.replicas
    each = f" (on each of the {copies} devices)" if copies > 1 else ""

    def replicated(name: str, count: int, note: str) -> MemoryItem:
        return _item(name, copies * count, where, note + each)

    items = [
        replicated(
            "weights",
            F32 * (s.params + s.buffers_persistent - s.puzzle_table + s.buffers_other),
            f"{s.params:,} float32 parameters and the network's buffers",
        ),
        replicated("gradients", F32 * s.params, "one float32 gradient per parameter"),
        replicated(
            "optimizer states",
            step.optimizer_state_bytes,
            f"{train.optimizer}: {step.optimizer_state_bytes / max(s.params, 1):.3g} bytes of "
            "state per parameter",
        ),
        replicated(
            "EMA copy",
            F32 * s.params if train.ema else 0,
            "shadow of every trainable float32 parameter (trm.model.ema: buffers such as the "
            "puzzle-embedding table are not averaged)"
            if train.ema
            else "train.ema is off",
        )
        if train.ema
        else _item("EMA copy", 0, where, "train.ema is off"),
        replicated(
            "puzzle embedding table",
            F32 * s.puzzle_table,
            f"{s.puzzle_table // max(s.puzzle_ndim, 1):,} identifiers x {s.puzzle_ndim} (a buffer)",
        ),
        _item(
            "sparse optimizer buffers",
            2 * F32 * (step.global_batch if s.puzzle_table else 0) * s.puzzle_ndim,
            where,
            "looked-up rows and their gradients for every micro-batch of the step (sign-SGD)",
        ),
    ]
    if low != F32:
        items.append(
            replicated(
                "autocast weight copies",
                low * (s.net_params + s.other_params),
                f"{precision} copies of the weights, made once per supervision step",
            )
        )
    if step.arch.attention_window > 0 and not step.arch.mlp_t:
        p = s.positions
        items.append(
            _item(
                "attention window mask",
                p * p * (1 + low),
                where,
                f"the [{p}, {p}] mask of arch.attention_window = {step.arch.attention_window}: "
                f"boolean, and additive in {precision} for scaled_dot_product_attention, built "
                "once and shared by every call (the fused attention kernels keep no scores or "
                "probabilities, dense or windowed, so the window changes no activation's size)",
            )
        )
    whose = f"all {step.global_batch} rows of the global batch"
    if step.rows != step.global_batch:
        whose = f"this process's {step.rows} rows of the global batch {step.global_batch}"
    items.append(
        _item(
            "carry (z_H, z_L)",
            step.carry_bytes(step.rows, F32),
            where,
            f"float32 z_H and {_reasoning_states(step)} for {whose}, with their data",
        )
    )
    return items


def _reasoning_states(step: StepPlan) -> str:
    """``z_L``, or how many a row holds with latent candidates."""
    return "z_L" if step.candidates == 1 else f"{step.candidates} z_L (latent candidates)"


def activation_items(step: StepPlan, tensors: StepTensors) -> list[MemoryItem]:
    """The grad-carrying cycle's activations (and the recomputed call with checkpointing), the
    step's transients and the no-grad cycles' peak where it is above the grad cycle's."""
    arch, where, micro = step.arch, step.location, step.micro
    how = (
        "their inputs only: activation checkpointing" if step.checkpointing else "kept for backward"
    )
    items = [
        _item(
            "activations",
            tensors.kept,
            where,
            f"{arch.L_cycles + 1} grad-carrying network calls x {arch.L_layers} layers, "
            f"micro-batch {micro}"
            + (f" x {step.candidates} latent candidates" if step.candidates > 1 else "")
            + f", {step.precision} ({how})",
        )
    ]
    if step.checkpointing:
        items.append(
            _item(
                "recomputed call",
                tensors.recomputed + tensors.recompute_backward,
                where,
                f"backward runs the checkpointed calls again one at a time: at its peak it "
                f"holds one call's activations ({arch.L_layers} layers, micro-batch {micro}) "
                f"and the gradient temporaries of its backward "
                f"({format_bytes(tensors.recompute_backward)}, a measured share)",
            )
        )
    items.append(
        _item(
            "step transients",
            tensors.transient,
            where,
            "new carry rows of the whole step, head and loss buffers (float64 stable-max), "
            "first backward gradients",
        )
    )
    items.append(
        _item(
            "no-grad cycle peak",
            tensors.nograd - tensors.activations - tensors.transient,
            where,
            f"{arch.H_cycles - 1} cycles without grad; counted only where above the grad cycle",
        )
    )
    return items


def host_items(
    step: StepPlan, hardware: HardwareProfile, process_baseline_bytes: int | None
) -> list[MemoryItem]:
    """Host memory besides the model's tensors: the data reader, rank 0's checkpoint
    snapshot under torchrun, and this process as it is before the run."""
    s, train = step.sizes, step.spec.train
    data_bytes, data_note = _dataset_bytes(
        step.spec, step.dataset, hardware, step.rows, step.on_device
    )
    items = [_item("data-loader buffers", data_bytes, "host", data_note)]
    if step.world > 1 and env_world().is_first:
        ema_params = s.params if train.ema else 0
        items.append(
            _item(
                "checkpoint snapshot",
                F32 * (s.params + s.buffers_persistent + ema_params)
                + step.optimizer_state_bytes
                + step.carry_bytes(step.global_batch, F32),
                "host",
                "rank 0's host copy of a checkpoint while a background thread writes it "
                "(trm.loop.checkpoints): weights, puzzle table, EMA, optimizer states, the "
                "global carry",
            )
        )
    baseline = process_rss_bytes() if process_baseline_bytes is None else process_baseline_bytes
    items.append(
        _item(
            "process baseline",
            baseline,
            "host",
            "resident size of this process now: the interpreter, torch and the loaded plugins",
        )
    )
    return items


def device_step_memory(step: StepPlan, tensors: StepTensors) -> StepMemory:
    """The step's device tensors as a backend's allocator model reads them."""
    arch = step.arch
    blocks = block_tensors(arch, step.sizes, step.precision, step.runtime.compile)
    calls = 1 if step.checkpointing else arch.L_cycles + 1
    return StepMemory(
        activation_tensor_bytes=tuple(
            b * step.micro * step.candidates for block in blocks.values() for b in block
        ),
        activation_tensor_copies=calls * arch.L_layers,
        reallocated_bytes=tensors.activations + tensors.transient,
        gradient_bytes=F32 * step.sizes.params,
        world_size=step.world,
        graphs=step.runtime.compile and step.runtime.graphs,
    )


def host_allocator_items(step: StepPlan, tensors: StepTensors) -> list[MemoryItem]:
    """Tensors in host memory: torch's CPU runtime and glibc's heap slack (measured
    allowances, see the constants)."""
    runtime = step.runtime
    slack, small = heap_slack_share(
        step.arch,
        step.sizes,
        step.precision,
        step.micro * step.candidates,
        step.rows * step.candidates,
        runtime,
    )
    grows = f"; the heap grows over the step's {step.micro_batches} micro-batches"
    return [
        _item(
            "CPU runtime",
            CPU_RUNTIME_BYTES,
            "host",
            "kernel code pages, OpenMP and oneDNN state touched by the first step",
        ),
        _item(
            "allocator fragmentation",
            slack * tensors.activations,
            "host",
            f"glibc heap slack: {slack:.0%} of the activations ({small:.0%} of them in "
            f"tensors under {MMAP_THRESHOLD_MAX // MIB} MiB, which stay on the heap"
            + ("; host memory reused, so larger ones do too" if runtime.reuse_host_memory else "")
            + (grows if step.micro_batches > 1 else "")
            + "; measured allowances for this block type and precision on Linux/glibc)",
        ),
    ]


def estimate_items(
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    dataset: DatasetShape,
    process_baseline_bytes: int | None = None,
    world_size: int | None = None,
    optimizer: DenseOptimizer | None = None,
) -> list[MemoryItem]:
    """Every item of one training step's peak; see the module docstring for the accounting.

    Per process: under torchrun (``world_size``, default from its environment) a process
    holds only its rows of the global batch — its carry, its batch, its micro-batches — but
    gathers every rank's puzzle-embedding lookups. On a device with memory of its own, the
    backend adds what its allocator and runtime hold
    (:meth:`~trm.device.contract.DeviceBackend.allocator_items`); in host memory, torch's
    CPU runtime and glibc's heap slack are counted here. ``optimizer`` is the dense
    optimizer's entry (its state bytes per parameter element; None: the built-in entry
    ``train.optimizer`` names)."""
    step = plan_step(spec, runtime, dataset, world_size, optimizer)
    tensors = step_tensors(step)
    items = persistent_items(step) + activation_items(step, tensors)
    items += host_items(step, hardware, process_baseline_bytes)
    if step.on_device:
        items += runtime.backend.allocator_items(device_step_memory(step, tensors))
    else:
        items += host_allocator_items(step, tensors)
    if runtime.compile:
        items.append(
            _item(
                "compile workspace",
                64 * MIB if step.on_device else 0,
                step.location,
                "torch.compile: generated kernels and their buffers (activations are counted "
                "as Inductor keeps them)",
            )
        )
    return items


@hookimpl
def estimate_memory(
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    dataset: DatasetShape,
    optimizer: DenseOptimizer,
) -> list[MemoryItem]:
    """The built-in estimate of a TRM training step (see the module docstring)."""
    return estimate_items(spec, hardware, runtime, dataset, optimizer=optimizer)
