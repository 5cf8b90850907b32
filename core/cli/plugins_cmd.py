"""``trm plugins``: every installed plugin, its distribution, hooks and whether it is on."""

from __future__ import annotations

import argparse

import attrs
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trm.cli.output import print_json
from trm.plugin_manager import load_plugins

WIDE_COLUMNS = 120


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("plugins", parents=[common], help="list plugins")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    if args.json:
        print_json({"plugins": [attrs.asdict(info) for info in pm.infos]})
        return 0
    console = Console()
    # Hook names are never cut; the descriptions need a wide terminal (or --json).
    described = console.width >= WIDE_COLUMNS
    table = Table(
        title="trm plugins (entry-point group trm.plugins)",
        box=box.SIMPLE_HEAD,
        caption=None if described else f"descriptions: {WIDE_COLUMNS}+ columns, or --json",
    )
    for column in ("name", "on", "activation", "distribution", "hooks"):
        table.add_column(column, no_wrap=True)
    if described:
        table.add_column("what it does", ratio=1)
    for info in pm.infos:
        row = [
            info.name,
            "yes" if info.enabled else "no",
            info.activation,
            f"{info.distribution} {info.version}",
            "\n".join(info.hooks),
        ]
        table.add_row(*row, *([info.description] if described else []))
    console.print(table)
    # Why each plugin that would switch itself on is off (its library or device is absent),
    # below the table so that no terminal width cuts it; opt-in ones say "opt-in" above.
    for info in pm.infos:
        if not info.enabled and info.activation != "opt-in" and info.off_reason:
            console.print(escape(f"{info.name} is off: {info.off_reason}"), soft_wrap=True)
    return 0
