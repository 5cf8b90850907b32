"""``trm export RUN_DIR --format reference --out DIR [--uncompiled]``: a trm run's newest
checkpoint (or a checkpoint file) as the reference implementation's ``step_N`` and
``all_config.yaml`` (see ``trm.interop.exporter`` and docs/interop.md)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from trm.cli.common import out_folder
from trm.cli.output import info, print_json
from trm.interop.exporter import FORMATS, export_reference
from trm.plugin_manager import load_plugins


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "export", parents=[common], help="write a run's weights in the reference's layout"
    )
    parser.add_argument("run", type=Path, help="a run directory or a checkpoint file")
    parser.add_argument("--format", choices=FORMATS, required=True, help="the layout to write")
    parser.add_argument("--out", type=out_folder, required=True, help="a new folder for the files")
    parser.add_argument(
        "--uncompiled",
        action="store_true",
        help="keys without _orig_mod. (for the reference run with DISABLE_COMPILE=1)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    result = export_reference(pm, args.run, args.out, compiled=not args.uncompiled)
    for note in result.notes:
        info(note)
    info(f"wrote {result.checkpoint} and {result.config}")
    command = ["python", "pretrain.py", f"load_checkpoint={result.checkpoint}"]
    prefix = "DISABLE_COMPILE=1 " if args.uncompiled else ""
    info(
        f"the reference continues it with: {prefix}{shlex.join(command)} plus the arch and "
        f"training keys of {result.config.name} (see docs/interop.md)"
    )
    if args.json:
        print_json(
            {
                "checkpoint": str(result.checkpoint),
                "config": str(result.config),
                "step": result.step,
                "notes": list(result.notes),
            }
        )
    return 0
