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
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from trm.data.shape import DatasetShape
from trm.hardware import HardwareProfile
from trm.memory import LOCATIONS, MemoryItem, collect_estimate
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec, RuntimeSpec
from trm.testing.strategies import dataset_shapes, hardware_profiles, run_specs, runtimes

Estimator = Callable[..., Any]


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


def _total(
    plugin: Any, spec: RunSpec, hw: HardwareProfile, rt: RuntimeChoice, ds: DatasetShape
) -> int:
    """The estimate's total with the runtime's precision taken from the spec."""
    return total_bytes(plugin, spec, hw, _runtime_for(spec, rt), ds)


# ------------------------------------------------------------------------- the properties
# Each takes the plugin and one drawn (spec, hardware, runtime, dataset), and for two of them
# one more drawn value; each asserts one property.


def items_are_valid_and_sum_to_the_total(plugin, spec, hw, rt, ds) -> None:
    items = call_estimator(plugin, spec, hw, _runtime_for(spec, rt), ds)
    for item in items:
        assert isinstance(item, MemoryItem), f"not a MemoryItem: {item!r}"
        assert isinstance(item.bytes, int), f"{item.name}: bytes is {type(item.bytes)}"
        assert item.bytes >= 0, f"{item.name}: negative bytes {item.bytes}"
        assert item.location in LOCATIONS, f"{item.name}: location {item.location!r}"
    estimate = collect_estimate([items])
    whole = sum(item.bytes for item in items)
    assert sum(estimate.total_bytes(loc) for loc in LOCATIONS) == whole


def monotone_in_batch(plugin, spec, hw, rt, ds) -> None:
    bigger = _with(spec, "train", global_batch_size=spec.train.global_batch_size * 2)
    bigger = _with(bigger, "runtime", micro_batch_size=spec.runtime.micro_batch_size * 2)
    assert _total(plugin, bigger, hw, rt, ds) >= _total(plugin, spec, hw, rt, ds)


def monotone_in_hidden_size(plugin, spec, hw, rt, ds) -> None:
    arch = spec.arch
    wider = attrs.evolve(
        arch, hidden_size=arch.hidden_size * 2, puzzle_emb_ndim=arch.puzzle_emb_ndim * 2
    )
    wider_spec = attrs.evolve(spec, arch=wider)
    assert _total(plugin, wider_spec, hw, rt, ds) >= _total(plugin, spec, hw, rt, ds)


def monotone_in_sequence_length(plugin, spec, hw, rt, ds, extra: int) -> None:
    longer = attrs.evolve(ds, seq_len=ds.seq_len + extra)
    assert _total(plugin, spec, hw, rt, longer) >= _total(plugin, spec, hw, rt, ds)


def monotone_in_cycles(plugin, spec, hw, rt, ds, which: str) -> None:
    more = _with(spec, "arch", **{which: getattr(spec.arch, which) + 1})
    assert _total(plugin, more, hw, rt, ds) >= _total(plugin, spec, hw, rt, ds)


def bf16_never_above_fp32(plugin, spec, hw, rt, ds) -> None:
    fp32 = total_bytes(plugin, spec, hw, attrs.evolve(rt, precision="fp32"), ds)
    bf16 = total_bytes(plugin, spec, hw, attrs.evolve(rt, precision="bf16"), ds)
    allowance = weight_copy_bytes(spec, ds)
    assert bf16 <= fp32 + allowance, f"bf16 {bf16} > fp32 {fp32} + weight copies {allowance}"


def checkpointing_never_above_without(plugin, spec, hw, rt, ds) -> None:
    on = _with(spec, "runtime", activation_checkpointing="on")
    off = _with(spec, "runtime", activation_checkpointing="off")
    assert _total(plugin, on, hw, rt, ds) <= _total(plugin, off, hw, rt, ds)


# name -> (the property, the strategy of its one more drawn value or None)
CHECKS: dict[str, tuple[Callable[..., None], st.SearchStrategy | None]] = {
    "items_are_valid_and_sum_to_the_total": (items_are_valid_and_sum_to_the_total, None),
    "monotone_in_batch": (monotone_in_batch, None),
    "monotone_in_hidden_size": (monotone_in_hidden_size, None),
    "monotone_in_sequence_length": (monotone_in_sequence_length, st.integers(1, 64)),
    "monotone_in_cycles": (monotone_in_cycles, st.sampled_from(["L_cycles", "H_cycles"])),
    "bf16_never_above_fp32": (bf16_never_above_fp32, None),
    "checkpointing_never_above_without": (checkpointing_never_above_without, None),
}
PROPERTIES = tuple(CHECKS)


# ------------------------------------------------------------------------- running them


def check_memory_estimator(
    plugin: Any,
    max_examples: int = 40,
    properties: tuple[str, ...] = PROPERTIES,
    max_hidden: int = 256,
    max_batch: int = 256,
    shrink: bool = True,
) -> list[str]:
    """Run the properties on ``plugin`` (a module or object with ``estimate_memory``, or the
    function itself). Returns the names of properties skipped (not applicable); raises
    AssertionError for a property that fails, with hypothesis' smallest falsifying example,
    or with ``shrink=False`` the first one found (seconds sooner, where a failure is what a
    test expects)."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    config = settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
        phases=phases,
    )
    specs = run_specs(max_hidden=max_hidden, max_batch=max_batch)
    has_checkpointing = "activation_checkpointing" in attrs.fields_dict(RuntimeSpec)
    skipped: list[str] = []
    for name in properties:
        if name == "checkpointing_never_above_without" and not has_checkpointing:
            skipped.append(name)
            continue
        check, more = CHECKS[name]
        _property_test(plugin, name, check, more, specs, config)()
    return skipped


def _property_test(
    plugin: Any,
    name: str,
    check: Callable[..., None],
    more: st.SearchStrategy | None,
    specs: st.SearchStrategy,
    config: settings,
) -> Callable[[], None]:
    """The hypothesis test of one property on ``plugin``, named as the property (hypothesis
    prints the name with the falsifying example)."""
    draws = {"spec": specs, "hw": hardware_profiles(), "rt": runtimes(), "ds": dataset_shapes()}
    if more is None:

        def test(spec, hw, rt, ds):
            check(plugin, spec, hw, rt, ds)

    else:
        draws["more"] = more

        def test(spec, hw, rt, ds, more):
            check(plugin, spec, hw, rt, ds, more)

    test.__name__ = test.__qualname__ = name
    return config(given(**draws)(test))
