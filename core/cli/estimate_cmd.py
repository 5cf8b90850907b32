"""``trm estimate SPEC``: the itemised peak memory of a training step against the budget.

Exit 0 when the run fits, 1 when it does not (2 for bad input). With ``--mode`` the spec is
first fitted to that tier, as ``trm run --mode`` would, and held against the tier's share of
the budget.
"""

from __future__ import annotations

import argparse
from typing import Any

from trm.cli.output import info, print_json
from trm.hardware import format_bytes
from trm.memory import MemoryEstimate
from trm.plugin_manager import load_plugins
from trm.prepare import (
    EXTREME_RISKS,
    MODE_TARGETS,
    MODES,
    adapt_spec,
    choose_runtime,
    detect_hardware,
    estimate_memory,
)
from trm.spec import apply_overrides, load_spec, resolve_spec_path

EXIT_FITS, EXIT_DOES_NOT_FIT = 0, 1


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "estimate", parents=[common], help="predict a run's peak memory, item by item"
    )
    parser.add_argument("spec", help="a TOML file or the name of a shipped spec")
    parser.add_argument(
        "--mode", choices=MODES, help="fit the spec to this tier first and use its target"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a spec value"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def estimate_document(
    estimate: MemoryEstimate, target_fraction: float, changes: list[dict[str, Any]]
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
        "changes": changes,
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
    where, share = document["budget_location"], document["budget_share"]
    target = document["target_fraction"]
    verdict = "fits" if document["fits"] else "DOES NOT FIT"
    print(
        f"{where} budget {format_bytes(budget)}: the step needs {share:.0%} of it "
        f"(target {target:.0%}) — {verdict}"
    )


def run(args: argparse.Namespace) -> int:
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins)
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    estimate = estimate_memory(pm, spec, hardware, runtime, log=info)
    changes: list[dict[str, Any]] = []
    target = 1.0
    if args.mode:
        spec, changes = adapt_spec(pm, spec, hardware, estimate, args.mode)
        estimate = estimate.for_spec(spec)
        target = MODE_TARGETS[args.mode]
        if not args.json:
            for change in changes:
                info(
                    f"adapted {change['key']}: {change['old']} -> {change['new']} "
                    f"({change['reason']})"
                )
            if args.mode == "extreme":
                info(f"warning: {EXTREME_RISKS}")
    document = estimate_document(estimate, target, changes)
    if args.json:
        print_json(document)
    else:
        print_breakdown(document)
    return EXIT_FITS if document["fits"] else EXIT_DOES_NOT_FIT
