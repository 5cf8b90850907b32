"""Tiers: micro-batch under the target, global batch kept, precision, loud shrinking."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from trm.hardware import HardwareProfile
from trm.memory import MODE_TARGETS, MemoryEstimate, MemoryItem
from trm.plugins.planning import tiers
from trm.spec import ArchSpec, RunSpec, RuntimeSpec, TrainSpec

GIB = 2**30


def linear_estimate(
    budget: int, per_row: int, fixed: int, per_hidden_row: int = 0, replicas: int = 1
):
    """A fake estimator: fixed + per_row x micro-batch (x hidden/64 when per_hidden_row), for
    a backend splitting each batch over ``replicas`` devices."""

    def make(spec: RunSpec) -> MemoryEstimate:
        micro = spec.runtime.micro_batch_size or spec.train.global_batch_size
        row = per_row + per_hidden_row * spec.arch.hidden_size // 64
        items = (MemoryItem("fixed", fixed), MemoryItem("activations", row * micro))
        return MemoryEstimate(items=items, host_budget_bytes=budget, remake=make, replicas=replicas)

    return make


def spec_with(batch: int, hidden: int = 256) -> RunSpec:
    return RunSpec(
        arch=ArchSpec(hidden_size=hidden, num_heads=4),
        train=TrainSpec(global_batch_size=batch, max_steps=1),
        runtime=RuntimeSpec(precision="fp32", threads=1),
    )


@settings(max_examples=60, deadline=None)
@given(
    batch=st.sampled_from([12, 64, 96, 768]),
    per_row_mib=st.integers(1, 400),
    mode=st.sampled_from(list(MODE_TARGETS)),
)
def test_micro_batch_is_the_largest_divisor_under_the_planned_target(batch, per_row_mib, mode):
    budget = 8 * GIB
    make = linear_estimate(budget, per_row_mib * 2**20, GIB // 4)
    spec = spec_with(batch)
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), mode)
    micro = adapted.runtime.micro_batch_size
    target = MODE_TARGETS[mode] - tiers.ESTIMATE_MARGIN
    assert adapted.train.global_batch_size == batch and 1 <= micro <= batch
    assert batch % micro == 0  # every micro-batch of a step has the same shape
    if adapted.arch == spec.arch:  # not shrunk
        assert make(adapted).fits(target)
        bigger = [d for d in range(micro + 1, batch + 1) if batch % d == 0]
        assert all(
            not make(
                attrs.evolve(adapted, runtime=attrs.evolve(adapted.runtime, micro_batch_size=d))
            ).fits(target)
            for d in bigger
        )
    assert all(c.key and c.reason for c in changes)


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.sampled_from([2, 4, 8]),
    batch=st.sampled_from([8, 64, 96, 768]),
    per_row_mib=st.integers(1, 4000),
    mode=st.sampled_from(list(MODE_TARGETS)),
)
def test_a_micro_batch_chosen_for_several_devices_divides_by_their_count(
    replicas, batch, per_row_mib, mode
):
    make = linear_estimate(8 * GIB, per_row_mib * 2**20, GIB // 4, replicas=replicas)
    spec = spec_with(batch)
    asked: list[int] = []

    def remake(candidate: RunSpec) -> MemoryEstimate:
        asked.append(candidate.runtime.micro_batch_size)
        return make(candidate)

    estimate = attrs.evolve(make(spec), remake=remake)
    adapted, _ = tiers.adapt(spec, HardwareProfile(), estimate, mode)
    micro = adapted.runtime.micro_batch_size
    assert batch % micro == 0 and micro % replicas == 0, micro
    assert all(size % replicas == 0 for size in asked), f"sizes tried: {asked}"


def test_conservative_never_takes_more_than_extreme():
    make = linear_estimate(16 * GIB, 50 * 2**20, GIB)
    spec = spec_with(768)
    micro = {
        m: tiers.adapt(spec, HardwareProfile(), make(spec), m)[0].runtime.micro_batch_size
        for m in MODE_TARGETS
    }
    assert micro["conservative"] <= micro["balanced"] <= micro["extreme"]


def test_model_shrinks_only_when_a_micro_batch_of_one_does_not_fit_and_says_so():
    make = linear_estimate(GIB, 0, 0, per_hidden_row=GIB // 2)  # hidden 256 -> 2 GiB per row
    spec = spec_with(8, hidden=256)
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), "balanced")
    assert adapted.arch.hidden_size < 256
    shrunk = [c for c in changes if c.key == "arch.hidden_size"]
    assert shrunk and tiers.SHRUNK in shrunk[0].reason
    roomy = linear_estimate(64 * GIB, 0, 0, per_hidden_row=GIB // 2)
    kept, changes = tiers.adapt(spec, HardwareProfile(), roomy(spec), "balanced")
    assert kept.arch == spec.arch and not any(tiers.SHRUNK in c.reason for c in changes)


def test_bf16_chosen_only_where_native_and_only_for_auto():
    make = linear_estimate(8 * GIB, 2**20, 0)
    auto = attrs.evolve(spec_with(8), runtime=RuntimeSpec(precision="auto", threads=1))
    native = HardwareProfile(cpu_native_bf16=True)
    assert tiers.adapt(auto, native, make(auto), "balanced")[0].runtime.precision == "bf16"
    plain = HardwareProfile(cpu_native_bf16=False)
    assert tiers.adapt(auto, plain, make(auto), "balanced")[0].runtime.precision == "auto"
    fixed = spec_with(8)  # explicit fp32 is the user's choice
    assert tiers.adapt(fixed, native, make(fixed), "balanced")[0].runtime.precision == "fp32"


def test_bf16_chosen_for_a_small_network_on_a_native_bf16_host():
    make = linear_estimate(8 * GIB, 2**20, 0)
    small = attrs.evolve(spec_with(8, hidden=64), runtime=RuntimeSpec(precision="auto", threads=1))
    native = HardwareProfile(cpu_native_bf16=True)
    assert tiers.adapt(small, native, make(small), "balanced")[0].runtime.precision == "bf16"


def test_an_explicit_micro_batch_that_fits_is_kept():
    make = linear_estimate(8 * GIB, 2**20, 0)
    spec = attrs.evolve(
        spec_with(64),
        # as a spec generated for extreme has them (host_memory too)
        runtime=RuntimeSpec(precision="fp32", threads=1, micro_batch_size=8, host_memory="system"),
    )
    adapted, changes = tiers.adapt(spec, HardwareProfile(), make(spec), "extreme")
    assert adapted.runtime.micro_batch_size == 8 and changes == []


def test_threads_are_left_to_the_backend_which_counts_the_free_cores():
    """A tier that wrote the usable cores into ``runtime.threads`` would make them look set by
    the user: the cpu backend could then neither count busy cores nor follow them."""
    make = linear_estimate(8 * GIB, 2**20, GIB // 4)
    spec = attrs.evolve(spec_with(64), runtime=RuntimeSpec(precision="fp32", threads=0))
    adapted, changes = tiers.adapt(spec, HardwareProfile(physical_cores=8), make(spec), "balanced")
    assert adapted.runtime.threads == 0
    assert all(change.key != "runtime.threads" for change in changes)
