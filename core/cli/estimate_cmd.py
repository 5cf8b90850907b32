"""``trm estimate SPEC``: the itemised peak memory of a training step against the budget.

Exit 0 when the run fits, 1 when it does not (2 for bad input). The spec is first fitted to
the tier ``--mode`` names (balanced by default, as ``trm run``) and held against the tier's
share of the budget; ``--mode as-written`` holds the spec unchanged against the whole budget.
"""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from trm.cli.common import add_set_option
from trm.cli.output import info, print_json
from trm.data.reader import ReaderChoice
from trm.hardware import format_bytes
from trm.memory import DEFAULT_MODE, EXTREME_RISKS, MODE_TARGETS, MODES, MemoryEstimate
from trm.paths import default_run_dir
from trm.plan import plan_run
from trm.plan.tiers import CheckpointingOption, checkpointing_options
from trm.plugin_manager import load_plugins
from trm.spec import Change, apply_overrides, load_spec, resolve_spec_path

EXIT_FITS, EXIT_DOES_NOT_FIT = 0, 1


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "estimate", parents=[common], help="predict a run's peak memory, item by item"
    )
    parser.add_argument("spec", help="a TOML file or the name of a shipped spec")
    parser.add_argument(
        "--mode",
        choices=(*MODES, "as-written"),
        default=DEFAULT_MODE,
        help=f"fit the spec to this tier first, as trm run does (default {DEFAULT_MODE}); "
        "as-written: the spec unchanged, against the whole budget",
    )
    add_set_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def estimate_document(
    estimate: MemoryEstimate,
    target_fraction: float,
    changes: tuple[Change, ...],
    mode: str,
    reader: ReaderChoice,
    options: list[CheckpointingOption] | None = None,
) -> dict[str, Any]:
    """The JSON document of ``trm estimate --json`` (field names are a stable interface)."""
    where = estimate.limiting_location()
    budget = estimate.host_budget_bytes if where == "host" else estimate.device_budget_bytes
    charged = estimate.charged_bytes(where)
    target = None if budget is None else int(budget * target_fraction)
    return {
        "host_total_bytes": estimate.total_bytes("host"),
        "device_total_bytes": estimate.total_bytes("device"),
        "budget_bytes": budget,
        "budget_location": where,
        "target_fraction": target_fraction,
        "target_bytes": target,
        "fits": target is None or charged <= target,
        "budget_share": None if not budget else charged / budget,
        "items": [
            {"name": i.name, "bytes": i.bytes, "location": i.location, "note": i.note}
            for i in estimate.items
        ],
        "changes": [attrs.asdict(c) for c in changes],
        "mode": mode,
        "reader": attrs.asdict(reader),
        # the same spec with runtime.activation_checkpointing off and on, side by side
        "activation_checkpointing": {
            o.setting: {"peak_bytes": o.peak_bytes, "budget_share": o.budget_share}
            for o in options or ()
        },
    }


def print_breakdown(document: dict[str, Any]) -> None:
    """The items as a table on stdout, then the verdict."""
    width = max(len(item["name"]) for item in document["items"])
    for location in ("device", "host"):
        rows = [i for i in document["items"] if i["location"] == location]
        if not rows:
            continue
        print(f"{location}:")
        for item in rows:
            print(f"  {item['name']:<{width}}  {format_bytes(item['bytes']):>11}  {item['note']}")
        total = document[f"{location}_total_bytes"]
        print(f"  {'total':<{width}}  {format_bytes(total):>11}")
    budget = document["budget_bytes"]
    if budget is None:
        print("budget: unknown (no memory figure for this machine); cannot judge the fit")
        return
    options = document.get("activation_checkpointing") or {}
    if options:
        described = [
            CheckpointingOption(setting, o["peak_bytes"], o["budget_share"]).describe()
            for setting, o in options.items()
        ]
        print(f"activation checkpointing {', '.join(described)}")
    where, share = document["budget_location"], document["budget_share"]
    target = document["target_fraction"]
    verdict = "fits" if document["fits"] else "DOES NOT FIT"
    print(
        f"{where} budget {format_bytes(budget)}: the step needs {share:.0%} of it "
        f"(target {target:.0%}) — {verdict}"
    )


def run(args: argparse.Namespace) -> int:
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins, spec_tables=spec.plugins)
    mode = None if args.mode == "as-written" else args.mode
    plan = plan_run(pm, spec, mode, default_run_dir(spec.name), log=info)
    target = MODE_TARGETS[mode] if mode else 1.0
    if not args.json:
        info(
            f"mode {args.mode}"
            + (" (the default of trm run)" if args.mode == DEFAULT_MODE else "")
            + f": the step must stay under {target:.0%} of the budget"
        )
        for change in plan.changes:
            info(change.describe())
        info(f"data reader: {plan.reader.name} ({plan.reader.reason})")
        if mode == "extreme":
            info(f"warning: {EXTREME_RISKS}")
    document = estimate_document(
        plan.estimate, target, plan.changes, args.mode, plan.reader, checkpointing_options(plan)
    )
    if args.json:
        print_json(document)
    else:
        print_breakdown(document)
    return EXIT_FITS if document["fits"] else EXIT_DOES_NOT_FIT
