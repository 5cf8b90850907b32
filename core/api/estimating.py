"""``trm.estimate``: the itemised peak memory of a training step against the budget — the
report ``trm estimate`` prints (core/cli/estimate_cmd.py calls :func:`estimate_memory`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from trm.api.arguments import (
    override_texts,
    path_argument,
    plugin_arguments,
    python_errors,
    text_argument,
)
from trm.api.log import Log, say
from trm.api.specs import SpecLike, read_spec
from trm.data.reader import ReaderChoice
from trm.device.threads import torch_threads_kept
from trm.errors import TrmError
from trm.hardware import HardwareProfile, format_bytes
from trm.memory import DEFAULT_MODE, EXTREME_RISKS, MODE_TARGETS, MODES, MemoryEstimate
from trm.paths import default_run_dir
from trm.plan import plan_run
from trm.plan.tiers import CheckpointingOption, checkpointing_options
from trm.plugin_manager import load_plugins
from trm.runtime import RuntimeChoice
from trm.spec import Change, RunSpec

AS_WRITTEN = "as-written"  # the spec unchanged, held against the whole budget


@attrs.frozen
class Estimate:
    """What a step of the fitted spec needs, item by item, against this machine's budget.

    ``memory`` holds the items (name, bytes, location, note) and the budgets; ``changes``
    what the tier changed; ``target_fraction`` the share of the budget the tier allows
    (1.0 as written); ``reader`` the data reader the run would use; ``checkpointing`` the
    same spec with activation checkpointing off and on; ``notes`` the lines ``trm estimate``
    shows above the table; ``hardware`` the machine as the plugins detected it (what ``trm
    analyze --profile-only`` shows) and ``runtime`` the device, precision and threads the
    run would use; ``spec`` the spec fitted to the tier.
    """

    memory: MemoryEstimate
    target_fraction: float
    changes: tuple[Change, ...]
    mode: str
    reader: ReaderChoice
    hardware: HardwareProfile = attrs.field(repr=False)
    runtime: RuntimeChoice = attrs.field(repr=False)
    spec: RunSpec = attrs.field(repr=False)
    checkpointing: tuple[CheckpointingOption, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def budget_location(self) -> str:
        """The budget that binds: "host" or "device"."""
        return self.memory.limiting_location()

    @property
    def budget_bytes(self) -> int | None:
        """The binding budget in bytes; None when this machine's memory is unknown."""
        if self.budget_location == "host":
            return self.memory.host_budget_bytes
        return self.memory.device_budget_bytes

    @property
    def fits(self) -> bool:
        """Whether the step stays within the tier's share of the binding budget (True when
        the budget is unknown: nothing to judge against)."""
        budget = self.budget_bytes
        if budget is None:
            return True
        return self.memory.charged_bytes(self.budget_location) <= int(budget * self.target_fraction)

    def document(self) -> dict[str, Any]:
        """The JSON document ``trm estimate --json`` prints (its field names are a stable
        interface: host_total_bytes, device_total_bytes, budget_bytes, fits, items, …)."""
        where, budget = self.budget_location, self.budget_bytes
        charged = self.memory.charged_bytes(where)
        return {
            "host_total_bytes": self.memory.total_bytes("host"),
            "device_total_bytes": self.memory.total_bytes("device"),
            "budget_bytes": budget,
            "budget_location": where,
            "target_fraction": self.target_fraction,
            "target_bytes": None if budget is None else int(budget * self.target_fraction),
            "fits": self.fits,
            "budget_share": None if not budget else charged / budget,
            "items": [
                {"name": i.name, "bytes": i.bytes, "location": i.location, "note": i.note}
                for i in self.memory.items
            ],
            "changes": [attrs.asdict(c) for c in self.changes],
            "mode": self.mode,
            "reader": attrs.asdict(self.reader),
            # the same spec with runtime.activation_checkpointing off and on, side by side
            "activation_checkpointing": {
                o.setting: {"peak_bytes": o.peak_bytes, "budget_share": o.budget_share}
                for o in self.checkpointing
            },
        }

    def table(self) -> str:
        """The items as the table ``trm estimate`` prints, then the verdict line."""
        items = self.memory.items
        width = max((len(i.name) for i in items), default=5)
        lines = []
        for location in ("device", "host"):
            rows = [i for i in items if i.location == location]
            if not rows:
                continue
            lines.append(f"{location}:")
            for item in rows:
                lines.append(f"  {item.name:<{width}}  {format_bytes(item.bytes):>11}  {item.note}")
            total = self.memory.total_bytes(location)
            lines.append(f"  {'total':<{width}}  {format_bytes(total):>11}")
        budget = self.budget_bytes
        if budget is None:
            lines.append(
                "budget: unknown (no memory figure for this machine); cannot judge the fit"
            )
            return "\n".join(lines)
        if self.checkpointing:
            described = ", ".join(o.describe() for o in self.checkpointing)
            lines.append(f"activation checkpointing {described}")
        share = self.memory.charged_bytes(self.budget_location) / max(budget, 1)
        verdict = "fits" if self.fits else "DOES NOT FIT"
        lines.append(
            f"{self.budget_location} budget {format_bytes(budget)}: the step needs {share:.0%} "
            f"of it (target {self.target_fraction:.0%}) — {verdict}"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return "\n".join((*self.notes, self.table()))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython shows the table, as ``trm estimate`` does."""
        printer.text(str(self))


def estimate(
    spec: SpecLike,
    *,
    out: Path | str | None = None,
    plugins: Any = (),
    disable: Any = (),
    overrides: Any = None,
    max_steps: int | None = None,
    resume: str | Path = "auto",
    mode: str = DEFAULT_MODE,
) -> Estimate:
    """The itemised memory estimate :func:`trm.train` with the same arguments would plan
    with (``trm estimate SPEC --mode MODE --set …``), on this machine; nothing is trained.

    Takes :func:`trm.train`'s options so that one set of keyword arguments serves both;
    ``max_steps`` and ``resume`` do not change a step's memory and are not used. ``mode``
    may also be "as-written" (the spec unchanged, against the whole budget). ``out`` is
    where a dataset the shape needs would be built (default ``runs/<spec name>``). Bad
    input raises :class:`~trm.errors.TrmError` with the CLI's message.
    """
    del max_steps, resume  # accepted for symmetry with train(); a step's memory ignores them
    with python_errors():
        names, objects = plugin_arguments(plugins, disable)
        return estimate_memory(
            spec,
            names,
            override_texts(overrides),
            text_argument(mode, "mode", (*MODES, AS_WRITTEN)),
            path_argument(out, "out"),
            say,
            objects,
        )


@torch_threads_kept()
def estimate_memory(
    spec: SpecLike,
    plugins: tuple[str, ...],
    overrides: tuple[str, ...],
    mode: str,
    out: Path | None,
    log: Log,
    plugin_objects: Iterable[tuple[str, Any]] = (),
) -> Estimate:
    """The work of ``trm estimate``: load the spec, load the plugins (and the in-process
    ``plugin_objects``), plan for ``mode`` (fitting the spec to the tier, or as written),
    and itemise the step's memory. torch's thread count, which the backend sets as it
    plans, is the caller's again when it returns or raises."""
    if mode not in (*MODES, AS_WRITTEN):
        raise TrmError(
            f"argument --mode: invalid choice: {mode!r} (choose from "
            f"{', '.join(repr(m) for m in (*MODES, AS_WRITTEN))})"
        )
    loaded = read_spec(spec, overrides)
    pm = load_plugins(plugins, extra_modules=tuple(plugin_objects), spec_tables=loaded.plugins)
    tier = None if mode == AS_WRITTEN else mode
    plan = plan_run(pm, loaded, tier, default_run_dir(loaded.name, out), log=log)
    target = MODE_TARGETS[tier] if tier else 1.0
    notes = [
        f"mode {mode}"
        + (" (the default of trm run)" if mode == DEFAULT_MODE else "")
        + f": the step must stay under {target:.0%} of the budget",
        *(change.describe() for change in plan.changes),
        f"data reader: {plan.reader.name} ({plan.reader.reason})",
    ]
    if tier == "extreme":
        notes.append(f"warning: {EXTREME_RISKS}")
    return Estimate(
        memory=plan.estimate,
        target_fraction=target,
        changes=tuple(plan.changes),
        mode=mode,
        reader=plan.reader,
        hardware=plan.hardware,
        runtime=plan.runtime,
        spec=plan.spec,
        checkpointing=tuple(checkpointing_options(plan)),
        notes=tuple(notes),
    )
