"""Hypothesis strategies for trm's value types: run specs, runtimes, dataset shapes, machines.

Sizes are kept small enough that an estimator can build a model on the meta device for each
example quickly; every generated spec passes :func:`trm.spec.validate`.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from trm.data.shape import DatasetShape
from trm.hardware import AcceleratorInfo, HardwareProfile
from trm.runtime import RuntimeChoice
from trm.spec import ArchSpec, RunSpec, RuntimeSpec, TrainSpec, validate

GIB = 2**30


@st.composite
def arch_specs(draw: st.DrawFn, max_hidden: int = 512) -> ArchSpec:
    """A valid TRM architecture: attention or mlp_t, any position encoding, 1-3 H cycles."""
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([8, 16, 32, 64]))
    hidden = min(heads * head_dim, max_hidden)
    hidden -= hidden % heads
    mlp_t = draw(st.booleans())
    pos = "none" if mlp_t else draw(st.sampled_from(["rope", "learned", "none"]))
    prefix = draw(st.integers(0, 4))
    puzzle_ndim = draw(st.sampled_from([0, hidden])) if prefix else 0
    if prefix == 0 and mlp_t:
        prefix = 1
    return ArchSpec(
        hidden_size=hidden,
        expansion=draw(st.sampled_from([2.0, 4.0])),
        num_heads=heads,
        L_layers=draw(st.integers(1, 2)),
        H_cycles=draw(st.integers(1, 3)),
        L_cycles=draw(st.integers(1, 4)),
        pos_encodings=pos,
        mlp_t=mlp_t,
        puzzle_emb_ndim=puzzle_ndim,
        puzzle_emb_len=prefix,
    )


@st.composite
def run_specs(draw: st.DrawFn, max_hidden: int = 512, max_batch: int = 512) -> RunSpec:
    """A valid RunSpec; the micro-batch is 0 (whole batch) or 1 to the global batch."""
    arch = draw(arch_specs(max_hidden=max_hidden))
    global_batch = draw(st.integers(1, max_batch))
    micro = draw(st.one_of(st.just(0), st.integers(1, global_batch)))
    spec = RunSpec(
        name="hypothesis",
        arch=arch,
        train=TrainSpec(
            global_batch_size=global_batch,
            max_steps=10,
            ema=draw(st.booleans()),
            optimizer=draw(st.sampled_from(["adam_atan2", "adamw"])),
        ),
        runtime=RuntimeSpec(
            device="cpu",
            precision=draw(st.sampled_from(["fp32", "bf16"])),
            micro_batch_size=micro,
            activation_checkpointing=draw(st.sampled_from(["auto", "off", "on"])),
        ),
    )
    validate(spec, "hypothesis")
    return spec


def dataset_shapes() -> st.SearchStrategy[DatasetShape]:
    """Train-split shapes from 4x4 Sudoku up to mazes (seq_len 4-128)."""
    return st.builds(
        DatasetShape,
        seq_len=st.integers(4, 128),
        vocab_size=st.integers(3, 16),
        num_puzzle_identifiers=st.integers(1, 64),
        total_puzzles=st.integers(0, 100_000),
        total_groups=st.integers(0, 10_000),
        train_file_bytes=st.integers(0, 2**28),
    )


def runtimes(device: str = "cpu") -> st.SearchStrategy[RuntimeChoice]:
    """What a backend might choose: fp32 or bf16, 1-16 threads, compiled or not."""
    return st.builds(
        RuntimeChoice,
        device=st.just(device),
        precision=st.sampled_from(["fp32", "bf16"]),
        threads=st.integers(1, 16),
        compile=st.booleans(),
    )


@st.composite
def hardware_profiles(draw: st.DrawFn) -> HardwareProfile:
    """Machines from a 4 GiB laptop to a GPU server; any fact may be unknown (None)."""
    total = draw(st.integers(4, 512)) * GIB
    available = draw(st.integers(GIB // 2, total))
    maybe = lambda strategy: st.one_of(st.none(), strategy)  # noqa: E731
    accelerators = draw(
        maybe(
            st.lists(
                st.builds(
                    AcceleratorInfo,
                    kind=st.just("gpu"),
                    index=st.just(0),
                    name=st.sampled_from(["NVIDIA H100", "NVIDIA RTX 4090", "Tesla T4"]),
                    memory_total_bytes=st.integers(8, 141).map(lambda g: g * GIB),
                    bf16=st.booleans(),
                ),
                max_size=1,
            ).map(tuple)
        )
    )
    profile = HardwareProfile(
        os=draw(maybe(st.sampled_from(["Linux 6.1", "Darwin 23.0"]))),
        physical_cores=draw(maybe(st.integers(1, 128))),
        logical_cores=draw(maybe(st.integers(1, 256))),
        cpu_native_bf16=draw(maybe(st.booleans())),
        memory_total_bytes=total,
        memory_available_bytes=available,
        memory_budget_bytes=max(0, min(total - max(GIB, total // 10), available)),
        accelerators=accelerators,
    )
    return attrs.evolve(profile)
