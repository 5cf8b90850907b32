"""``trm import CHECKPOINT [--config FILE] [--data DIR] [--source NAME] --out RUN_DIR``:
a checkpoint of the reference implementation becomes a trm run directory that ``trm eval``,
``trm solve``, ``trm report`` and ``trm run RUN_DIR/spec.toml --out RUN_DIR`` accept (see
``trm.plugins.formats.importer`` and docs/interop.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from trm.cli.common import out_folder
from trm.cli.output import info, print_json
from trm.plugin_manager import load_plugins


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "import", parents=[common], help="make a trm run from a reference checkpoint"
    )
    parser.add_argument(
        "checkpoint", type=Path, help="the reference's step_N file, or the folder holding it"
    )
    parser.add_argument(
        "--config", type=Path, help="its all_config.yaml (default: the one beside the file)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        help="the dataset it was trained on (default: the config's data_paths, found from "
        "here or from the config's folder)",
    )
    parser.add_argument(
        "--source", help="the data source (sudoku, maze, arc; default: told by the dataset)"
    )
    parser.add_argument("--out", type=out_folder, required=True, help="the new run directory")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trm.plugins.formats.importer import import_reference  # torch loads here

    pm = load_plugins(args.plugins)
    result = import_reference(
        pm, args.checkpoint, args.out, args.config, args.data, args.source, info
    )
    for note in result.notes:
        info(note)
    spec_file = result.run_dir / "spec.toml"
    info(f"wrote {result.run_dir} (spec {result.spec.name}, step {result.step})")
    info(
        f"evaluate: trm eval {result.run_dir}; continue: trm run {spec_file} --out {result.run_dir}"
    )
    if args.json:
        print_json(
            {
                "run_dir": str(result.run_dir),
                "spec": str(spec_file),
                "step": result.step,
                "notes": list(result.notes),
            }
        )
    return 0
