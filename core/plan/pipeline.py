"""The plan of a run: detect → configure → estimate → adapt, written once.

``plan_run`` is what every command that fits a spec to this machine calls (``trm run``,
``trm estimate``; ``trm analyze`` calls it once per tier). Each step calls one hook and turns
its answers into the core's types.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import torch
from attrs import frozen

from trm.data.reader import ReaderChoice, choose_reader
from trm.data.selection import find_selection_rule
from trm.data.shape import DatasetShape
from trm.data.symmetry import check_attempts
from trm.errors import TrmError
from trm.hardware import HardwareProfile, merge_profiles
from trm.memory import MODES, MemoryEstimate, collect_estimate
from trm.model.dense_optimizer import check_builds
from trm.plan.compile_choice import settle_compile
from trm.plan.dataset import dataset_shape, find_data_source
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import Change, RunSpec

Log = Callable[[str], None]


@frozen
class Plan:
    """A spec fitted to this machine for one tier.

    ``spec`` is the adapted spec (``requested`` as given), ``changes`` what ``adapt_config``
    changed and why, ``runtime`` the backend's choice for the adapted spec, ``estimate`` the
    memory estimate of the adapted spec, ``dataset`` the train split's shape, ``reader`` which
    data reader serves it and why. ``mode`` is the tier (None: the spec as written).
    """

    requested: RunSpec
    spec: RunSpec
    mode: str | None
    hardware: HardwareProfile
    runtime: RuntimeChoice
    dataset: DatasetShape
    estimate: MemoryEstimate
    changes: tuple[Change, ...]
    reader: ReaderChoice


def detect_hardware(pm: TrmPluginManager) -> HardwareProfile:
    """One profile merged from every plugin's ``detect_hardware`` part."""
    return merge_profiles(pm.hook.detect_hardware())


def choose_runtime(pm: TrmPluginManager, spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice:
    """The first backend plugin's answer to ``configure_runtime``."""
    choice = pm.hook.configure_runtime(spec=spec, hardware=hardware)
    if choice is None:
        raise TrmError(
            f"no backend plugin can run runtime.device={spec.runtime.device!r} here; "
            "use runtime.device='auto' or enable the backend plugin (trm plugins lists them)"
        )
    if spec.runtime.cuda_graphs == "on" and not choice.graphs:
        raise TrmError(
            f"runtime.cuda_graphs = 'on' but the run is on {choice.device} "
            f"({choice.backend_name}), which replays no CUDA graphs; set runtime.cuda_graphs "
            "= 'auto' or 'off'"
        )
    return choice


# Precisions a checkpoint may have been trained in that are fast only where native.
HALF_PRECISIONS = ("bf16", "fp16")


def runtime_here(
    pm: TrmPluginManager, spec: RunSpec, hardware: HardwareProfile, log: Log
) -> RuntimeChoice:
    """The runtime to score or solve with a model trained under ``spec``: its device, or the
    best one here when that is not available (a model trained on a GPU must still be scored
    on a machine without one; ``log`` says so), and a half precision (bf16, fp16) as
    ``auto``: bf16 where this machine multiplies it natively, fp32 where it would only be
    emulated (around 100x slower on a CPU without native bf16, for the same answers within
    rounding). fp32 is kept. TrmError when no backend can run it at all."""
    if spec.runtime.precision in HALF_PRECISIONS:
        spec = attrs.evolve(spec, runtime=attrs.evolve(spec.runtime, precision="auto"))
    try:
        return choose_runtime(pm, spec, hardware)
    except TrmError:
        if spec.runtime.device == "auto" and spec.runtime.precision == "auto":
            raise
    first_error: TrmError | None = None
    for changes in ({"device": "auto"}, {"device": "auto", "precision": "auto"}):
        candidate = attrs.evolve(spec, runtime=attrs.evolve(spec.runtime, **changes))
        try:
            runtime = choose_runtime(pm, candidate, hardware)
        except TrmError as exc:
            first_error = first_error or exc
            continue
        log(
            f"the checkpoint was trained with runtime.device={spec.runtime.device!r}, which "
            f"is not available here; running on {runtime.device} ({runtime.precision})"
        )
        return runtime
    assert first_error is not None
    raise first_error


def estimate_memory(
    pm: TrmPluginManager,
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    dataset: DatasetShape,
) -> MemoryEstimate:
    """Every plugin's items for ``spec``, with the host and device budgets.

    The estimate can be remade for another spec (``MemoryEstimate.for_spec``): the runtime is
    re-chosen when the spec's runtime section differs, the dataset is kept. Its ``replicas``
    is the backend's answer (the devices a batch is split over), which the tiers' micro-batch
    sizes must divide by.
    """

    def make(candidate: RunSpec) -> MemoryEstimate:
        chosen = runtime
        if candidate.runtime != spec.runtime:
            chosen = choose_runtime(pm, candidate, hardware)
        parts = pm.hook.estimate_memory(
            spec=candidate,
            hardware=hardware,
            runtime=chosen,
            dataset=dataset,
            optimizer=pm.dense_optimizer(candidate.train.optimizer),
        )
        device = torch.device(chosen.device)
        return collect_estimate(
            parts,
            host_budget_bytes=hardware.memory_budget_bytes,
            device_budget_bytes=chosen.backend.budget_bytes(hardware, device),
            unified_memory=chosen.backend.shares_host_memory(hardware, device),
            remake=make,
            replicas=chosen.backend.replicas(),
        )

    return make(spec)


def adapt_spec(
    pm: TrmPluginManager,
    spec: RunSpec,
    hardware: HardwareProfile,
    estimate: MemoryEstimate,
    mode: str,
) -> tuple[RunSpec, tuple[Change, ...]]:
    """Run the ``adapt_config`` chain; returns the final spec and every recorded change."""
    results = pm.call_chained(
        "adapt_config", "spec", spec=spec, hardware=hardware, estimate=estimate, mode=mode
    )
    changes: list[Change] = []
    for new_spec, plugin_changes in results:
        spec = new_spec
        changes.extend(_as_change(change) for change in plugin_changes)
    return spec, tuple(changes)


def _as_change(change: Change | tuple) -> Change:
    """A plugin's change; the 4-tuple ``(key, old, new, reason)`` of older plugins is read too."""
    return change if isinstance(change, Change) else Change(*change)


def check_device(pm: TrmPluginManager, device: str) -> None:
    """Refuse a ``runtime.device`` that no enabled backend plugin claims, naming the installed
    backends (and those that are off here)."""
    if device == "auto":
        return
    backends = pm.device_backends()
    if any(backend.claims(device) for backend in backends):
        return
    names = sorted({backend.name for backend in backends})
    off = pm.backend_plugins_off()
    hint = f"; installed but off here: {', '.join(off)} (trm plugins says why)" if off else ""
    raise TrmError(
        f"runtime.device: no backend plugin claims {device!r}; the backends here are "
        f"{', '.join(names) or 'none'}{hint}"
    )


def check_spec(pm: TrmPluginManager, spec: RunSpec, log: Log | None = None) -> None:
    """Refuse a ``runtime.device`` no backend claims, a ``train.optimizer`` no enabled plugin
    offers (or whose package is missing, or whose plugin answers what cannot work: a trial
    build over one parameter), ``[plugins.NAME]`` tables that name no installed
    plugin (a typo), note those of plugins that are off, then let every enabled
    plugin check the spec (``check_spec``)."""
    check_device(pm, spec.runtime.device)
    check_builds(pm.dense_optimizer(spec.train.optimizer), spec.train)
    installed = {info.name: info.enabled for info in pm.infos}
    for name in spec.plugins:
        if name not in installed:
            known = ", ".join(sorted(installed))
            raise TrmError(
                f"plugins.{name}: no installed plugin is called {name!r}; known: {known}"
            )
        if not installed[name] and log is not None:
            log(f"[plugins.{name}] is not used: the plugin is off (--plugins no:{name})")
    pm.hook.check_spec(spec=spec)


def plan_run(
    pm: TrmPluginManager,
    spec: RunSpec,
    mode: str | None,
    run_dir: Path,
    log: Log | None = None,
    build_data: bool = False,
    hardware: HardwareProfile | None = None,
) -> Plan:
    """Fit ``spec`` to this machine for ``mode`` (None: as written).

    ``run_dir`` is where the run reads its built data (``build_data``: build it there when
    the shape cannot be known otherwise). ``hardware`` reuses a profile already detected.
    The runtime is chosen again after adapting, since a tier may set precision or threads.
    The plugins check the spec first (:func:`check_spec`).
    """
    if mode is not None and mode not in MODES:
        raise TrmError(f"mode {mode!r}: choose one of {', '.join(MODES)}")
    check_spec(pm, spec, log)
    if spec.data.is_mix:
        for entry in spec.data.mix:
            find_data_source(pm, entry.source)  # an unknown source is an error with a dir
        if spec.train.eval_attempts > 1:
            raise TrmError(
                "train.eval_attempts: a mix's evaluation scores one attempt per puzzle; "
                "leave it at 1 with [[data.mix]]"
            )
        if spec.train.eval_explore > 1:
            raise TrmError(
                "train.eval_explore: a mix's evaluation scores one trajectory per puzzle; "
                "leave it at 1 with [[data.mix]]"
            )
    else:
        source = find_data_source(pm, spec.data.source)  # unknown: an error even with data.dir
        check_attempts(source, spec.train.eval_attempts, "train.eval_attempts")
        # a rule no plugin offers, or one the task cannot use, is refused before the run
        if spec.train.eval_explore > 1 or spec.train.eval_select:
            find_selection_rule(pm, spec.train.eval_select or None, source, "train.eval_select")
    hardware = hardware if hardware is not None else detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    dataset = dataset_shape(pm, spec, run_dir, log, build=build_data)
    runtime = settle_compile(runtime, spec, dataset, hardware)
    choose_reader(spec, dataset, hardware)  # refuses a memory reader that cannot fit, up front
    estimate = estimate_memory(pm, spec, hardware, runtime, dataset)
    adapted, changes = spec, ()
    if mode is not None:
        adapted, changes = adapt_spec(pm, spec, hardware, estimate, mode)
    if adapted != spec:
        if adapted.runtime != spec.runtime:
            runtime = choose_runtime(pm, adapted, hardware)
            runtime = settle_compile(runtime, adapted, dataset, hardware)
        estimate = estimate.for_spec(adapted)
    reader = choose_reader(adapted, dataset, hardware)
    return Plan(spec, adapted, mode, hardware, runtime, dataset, estimate, changes, reader)
