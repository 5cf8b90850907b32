"""Property checks any ``estimate_memory`` implementation should pass.

``check_memory_estimator(plugin)`` runs each property below with hypothesis and raises
AssertionError (hypothesis prints the falsifying spec) on the first that fails:

- every item is a MemoryItem with non-negative integer bytes at "host" or "device", and the
  per-location totals sum to the whole;
- the total never falls when the batch, the hidden size, the sequence length, the L cycles or
  the H cycles grow;
- bf16 autocast never needs more than fp32, apart from the bf16 copies of the weights that
  autocast keeps (2 bytes per parameter: for a tiny model at batch 1 they outweigh the
  activations bf16 halves, so a truthful estimator may show them);
- activation checkpointing never needs more than without it (``runtime.activation_checkpointing``
  "on" against "off"; skipped, and said so, with a ``RuntimeSpec`` that lacks the field).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trm.data.shape import DatasetShape
from trm.hardware import HardwareProfile
from trm.memory import LOCATIONS, MemoryItem, collect_estimate
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec, RuntimeSpec
from trm.testing.strategies import dataset_shapes, hardware_profiles, run_specs, runtimes

Estimator = Callable[..., Any]
PROPERTIES = (
    "items_are_valid_and_sum_to_the_total",
    "monotone_in_batch",
    "monotone_in_hidden_size",
    "monotone_in_sequence_length",
    "monotone_in_cycles",
    "bf16_never_above_fp32",
    "checkpointing_never_above_without",
)


def _estimator_of(plugin: Any) -> Estimator:
    function = getattr(plugin, "estimate_memory", plugin)
    if not callable(function):
        raise TypeError(f"{plugin!r} has no callable estimate_memory")
    return function


def call_estimator(
    plugin: Any,
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    dataset: DatasetShape,
) -> list[MemoryItem]:
    """Call ``plugin``'s estimate_memory with the hook arguments it accepts (as pluggy does);
    ``optimizer`` is the built-in entry ``spec.train.optimizer`` names."""
    from trm.model import BUILT_IN_OPTIMIZERS, choose_dense_optimizer

    function = _estimator_of(plugin)
    optimizer = choose_dense_optimizer(BUILT_IN_OPTIMIZERS, spec.train.optimizer)
    offered = {
        "spec": spec,
        "hardware": hardware,
        "runtime": runtime,
        "dataset": dataset,
        "optimizer": optimizer,
    }
    names = inspect.signature(function).parameters
    return list(function(**{k: v for k, v in offered.items() if k in names}) or [])


def total_bytes(
    plugin: Any, spec: RunSpec, hw: HardwareProfile, rt: RuntimeChoice, ds: DatasetShape
) -> int:
    """The estimate's total over both locations."""
    return sum(item.bytes for item in call_estimator(plugin, spec, hw, rt, ds))


def weight_copy_bytes(spec: RunSpec, dataset: DatasetShape) -> int:
    """2 bytes per parameter: the bf16 weight copies autocast keeps, the one thing bf16 adds."""
    import torch

    from trm.model import TinyRecursiveModel

    with torch.device("meta"):
        model = TinyRecursiveModel(
            spec.arch, dataset.seq_len, dataset.vocab_size, max(1, dataset.num_puzzle_identifiers)
        )
    return 2 * sum(p.numel() for p in model.parameters())


def _with(spec: RunSpec, section: str, **changes: Any) -> RunSpec:
    return attrs.evolve(spec, **{section: attrs.evolve(getattr(spec, section), **changes)})


def _runtime_for(spec: RunSpec, runtime: RuntimeChoice) -> RuntimeChoice:
    return attrs.evolve(runtime, precision=spec.runtime.precision)


def check_memory_estimator(
    plugin: Any,
    max_examples: int = 40,
    properties: tuple[str, ...] = PROPERTIES,
    max_hidden: int = 256,
    max_batch: int = 256,
) -> list[str]:
    """Run the properties on ``plugin`` (a module or object with ``estimate_memory``, or the
    function itself). Returns the names of properties skipped (not applicable); raises
    AssertionError for a property that fails."""
    config = settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )
    specs = run_specs(max_hidden=max_hidden, max_batch=max_batch)
    common = given(spec=specs, hw=hardware_profiles(), rt=runtimes(), ds=dataset_shapes())
    total = lambda spec, hw, rt, ds: total_bytes(plugin, spec, hw, _runtime_for(spec, rt), ds)  # noqa: E731
    skipped: list[str] = []

    @config
    @common
    def items_are_valid_and_sum_to_the_total(spec, hw, rt, ds):
        items = call_estimator(plugin, spec, hw, _runtime_for(spec, rt), ds)
        for item in items:
            assert isinstance(item, MemoryItem), f"not a MemoryItem: {item!r}"
            assert isinstance(item.bytes, int), f"{item.name}: bytes is {type(item.bytes)}"
            assert item.bytes >= 0, f"{item.name}: negative bytes {item.bytes}"
            assert item.location in LOCATIONS, f"{item.name}: location {item.location!r}"
        estimate = collect_estimate([items])
        whole = sum(item.bytes for item in items)
        assert sum(estimate.total_bytes(loc) for loc in LOCATIONS) == whole

    @config
    @common
    def monotone_in_batch(spec, hw, rt, ds):
        bigger = _with(spec, "train", global_batch_size=spec.train.global_batch_size * 2)
        bigger = _with(bigger, "runtime", micro_batch_size=spec.runtime.micro_batch_size * 2)
        assert total(bigger, hw, rt, ds) >= total(spec, hw, rt, ds)

    @config
    @common
    def monotone_in_hidden_size(spec, hw, rt, ds):
        arch = spec.arch
        wider = attrs.evolve(
            arch,
            hidden_size=arch.hidden_size * 2,
            puzzle_emb_ndim=arch.puzzle_emb_ndim * 2,
        )
        assert total(attrs.evolve(spec, arch=wider), hw, rt, ds) >= total(spec, hw, rt, ds)

    @config
    @given(
        spec=specs,
        hw=hardware_profiles(),
        rt=runtimes(),
        ds=dataset_shapes(),
        extra=st.integers(1, 64),
    )
    def monotone_in_sequence_length(spec, hw, rt, ds, extra):
        longer = attrs.evolve(ds, seq_len=ds.seq_len + extra)
        assert total(spec, hw, rt, longer) >= total(spec, hw, rt, ds)

    @config
    @given(
        spec=specs,
        hw=hardware_profiles(),
        rt=runtimes(),
        ds=dataset_shapes(),
        which=st.sampled_from(["L_cycles", "H_cycles"]),
    )
    def monotone_in_cycles(spec, hw, rt, ds, which):
        more = _with(spec, "arch", **{which: getattr(spec.arch, which) + 1})
        assert total(more, hw, rt, ds) >= total(spec, hw, rt, ds)

    @config
    @common
    def bf16_never_above_fp32(spec, hw, rt, ds):
        fp32 = total_bytes(plugin, spec, hw, attrs.evolve(rt, precision="fp32"), ds)
        bf16 = total_bytes(plugin, spec, hw, attrs.evolve(rt, precision="bf16"), ds)
        allowance = weight_copy_bytes(spec, ds)
        assert bf16 <= fp32 + allowance, f"bf16 {bf16} > fp32 {fp32} + weight copies {allowance}"

    @config
    @common
    def checkpointing_never_above_without(spec, hw, rt, ds):
        on = _with(spec, "runtime", activation_checkpointing="on")
        off = _with(spec, "runtime", activation_checkpointing="off")
        assert total(on, hw, rt, ds) <= total(off, hw, rt, ds)

    checks = {
        "items_are_valid_and_sum_to_the_total": items_are_valid_and_sum_to_the_total,
        "monotone_in_batch": monotone_in_batch,
        "monotone_in_hidden_size": monotone_in_hidden_size,
        "monotone_in_sequence_length": monotone_in_sequence_length,
        "monotone_in_cycles": monotone_in_cycles,
        "bf16_never_above_fp32": bf16_never_above_fp32,
        "checkpointing_never_above_without": checkpointing_never_above_without,
    }
    has_checkpointing = "activation_checkpointing" in attrs.fields_dict(RuntimeSpec)
    for name in properties:
        if name == "checkpointing_never_above_without" and not has_checkpointing:
            skipped.append(name)
            continue
        checks[name]()
    return skipped
