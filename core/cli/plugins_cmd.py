"""``trm plugins``: every installed plugin, its distribution, hooks and whether it is on."""

from __future__ import annotations

import argparse

import attrs
from rich.console import Console
from rich.table import Table

from trm.cli.output import print_json
from trm.plugin_manager import load_plugins


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("plugins", parents=[common], help="list plugins")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    if args.json:
        print_json({"plugins": [attrs.asdict(info) for info in pm.infos]})
        return 0
    table = Table(title="trm plugins (entry-point group trm.plugins)")
    for column in ("name", "on", "activation", "distribution", "hooks", "what it does"):
        table.add_column(column)
    for info in pm.infos:
        table.add_row(
            info.name,
            "yes" if info.enabled else "no",
            info.activation,
            f"{info.distribution} {info.version}",
            ", ".join(info.hooks),
            info.description,
        )
    Console().print(table)
    return 0
