"""The three tiers side by side, for ``trm analyze``: each the spec fitted to its share of the
memory budget (the tiers plugin's ``adapt_config``), with what it predicts and what to heed."""

from __future__ import annotations

from pathlib import Path

import attrs
from attrs import frozen

from trm.control import accumulation_steps
from trm.hardware import HardwareProfile, format_bytes
from trm.memory import EXTREME_RISKS, MODE_TARGETS, MODES
from trm.plan.pipeline import Plan, plan_run
from trm.plugin_manager import TrmPluginManager
from trm.spec import RunSpec

SHRUNK_MARK = "MODEL SHRUNK"
CHECKPOINTING_SETTINGS = ("off", "on")


@frozen
class CheckpointingOption:
    """The predicted peak of a spec with activation checkpointing ``setting`` ("off": every
    activation kept; "on": recomputed in backward), against the binding budget."""

    setting: str
    peak_bytes: int
    budget_share: float | None

    def describe(self) -> str:
        share = f" ({self.budget_share:.0%} of the budget)" if self.budget_share else ""
        return f"{self.setting}: {format_bytes(self.peak_bytes)}{share}"


def checkpointing_options(plan: Plan) -> list[CheckpointingOption]:
    """The plan's spec at its micro-batch with activation checkpointing off and on, side by
    side (for ``trm estimate`` and ``trm analyze``)."""
    spec, estimate = plan.spec, plan.estimate
    where = estimate.limiting_location()
    options = []
    for setting in CHECKPOINTING_SETTINGS:
        runtime = attrs.evolve(spec.runtime, activation_checkpointing=setting)
        other = estimate.for_spec(attrs.evolve(spec, runtime=runtime))
        options.append(
            CheckpointingOption(setting, other.charged_bytes(where), other.budget_fraction())
        )
    return options


@frozen
class TierPlan:
    """One tier: its plan, and the memory figures ``trm analyze`` shows."""

    plan: Plan

    @property
    def mode(self) -> str:
        return str(self.plan.mode)

    @property
    def target_fraction(self) -> float:
        return MODE_TARGETS[self.mode]

    @property
    def micro_batch_size(self) -> int:
        spec = self.plan.spec
        return spec.runtime.micro_batch_size or spec.train.global_batch_size

    @property
    def accumulation(self) -> int:
        return accumulation_steps(self.micro_batch_size, self.plan.spec.train.global_batch_size)

    @property
    def budget_bytes(self) -> int | None:
        estimate = self.plan.estimate
        if estimate.limiting_location() == "host":
            return estimate.host_budget_bytes
        return estimate.device_budget_bytes

    @property
    def predicted_bytes(self) -> int:
        estimate = self.plan.estimate
        return estimate.charged_bytes(estimate.limiting_location())

    @property
    def budget_share(self) -> float | None:
        return self.plan.estimate.budget_fraction()

    @property
    def fits(self) -> bool:
        return self.plan.estimate.fits(self.target_fraction)

    @property
    def shrunk(self) -> bool:
        return any(SHRUNK_MARK in change.reason for change in self.plan.changes)

    def named_spec(self) -> RunSpec:
        """The tier's spec named ``<spec>-<tier>``, as ``--generate-configs`` writes it."""
        return attrs.evolve(self.plan.spec, name=f"{self.plan.spec.name}-{self.mode}")


def plan_tiers(
    pm: TrmPluginManager, spec: RunSpec, hardware: HardwareProfile, run_dir: Path
) -> list[TierPlan]:
    """``spec`` fitted to each tier, in MODES order."""
    return [TierPlan(plan_run(pm, spec, mode, run_dir, hardware=hardware)) for mode in MODES]


def advice(
    hardware: HardwareProfile, requested_fits: bool, tiers: list[TierPlan]
) -> tuple[list[str], list[str]]:
    """(suggestions, warnings) for this machine and spec."""
    suggestions: list[str] = []
    warnings: list[str] = []
    if hardware.device_speeds is None:
        suggestions.append("run `trm analyze --benchmark` once to measure this machine's speeds")
    if hardware.cpu_native_bf16 is False and not hardware.accelerators:
        suggestions.append("this CPU has no native bf16: fp32 is used; a GPU would help most")
    if not requested_fits:
        warnings.append("the spec as written does not fit the memory budget; use a tier (--mode)")
    for tier in tiers:
        if tier.shrunk:
            warnings.append(
                f"{tier.mode}: even a micro-batch of 1 does not fit, so the MODEL IS SHRUNK "
                "(see the changes); results will differ from the recipe"
            )
    if hardware.on_battery:
        warnings.append("on battery: plug in for long runs (the thermal plugin pauses on battery)")
    if hardware.swap_total_bytes == 0:
        warnings.append("no swap: a run that outgrows memory is killed at once; prefer balanced")
    if hardware.storage_free_bytes is not None and hardware.storage_free_bytes < 2**30:
        warnings.append(
            f"only {format_bytes(hardware.storage_free_bytes)} free where runs are written"
        )
    warnings.append(f"extreme: {EXTREME_RISKS}")
    return suggestions, warnings
