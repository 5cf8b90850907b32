"""``trm export RUN_DIR --format reference|hf --out DIR``: a trm run's newest checkpoint (or a
checkpoint file) as the reference implementation's ``step_N`` and ``all_config.yaml``
(``trm.interop.exporter``), or as a model folder in the Hugging Face Hub's layout —
``model.safetensors``, ``config.json``, a README.md model card (``trm.interop.hf_export``).
See docs/interop.md."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from trm.cli.common import out_folder
from trm.cli.output import info, print_json
from trm.errors import TrmError
from trm.interop.exporter import FORMATS, export_reference
from trm.interop.hf_export import export_hf
from trm.plugin_manager import load_plugins


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "export",
        parents=[common],
        help="write a run's weights in the reference's layout or as a Hugging Face model folder",
    )
    parser.add_argument("run", type=Path, help="a run directory or a checkpoint file")
    parser.add_argument("--format", choices=FORMATS, required=True, help="the layout to write")
    parser.add_argument("--out", type=out_folder, required=True, help="a new folder for the files")
    parser.add_argument(
        "--uncompiled",
        action="store_true",
        help="keys without _orig_mod. (for the reference run with DISABLE_COMPILE=1)",
    )
    parser.add_argument(
        "--license", help="--format hf: the license the model card names (e.g. apache-2.0)"
    )
    parser.add_argument(
        "--dataset",
        action="append",
        default=[],
        help="--format hf: a Hub dataset the model card names (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.format == "hf":
        return run_hf(args)
    if args.license or args.dataset:
        raise TrmError("--license and --dataset describe a model card: use them with --format hf")
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


def run_hf(args: argparse.Namespace) -> int:
    """``--format hf``: the model folder, then the user's own upload command."""
    if args.uncompiled:
        raise TrmError("--uncompiled applies to --format reference only; leave it out")
    pm = load_plugins(args.plugins)
    result = export_hf(pm, args.run, args.out, args.license, tuple(args.dataset))
    weights = "EMA weights" if result.ema else "weights"
    info(f"wrote {result.folder} ({weights} of step {result.step})")
    info(f"share it with: huggingface-cli upload USER/NAME {result.folder}")
    if args.json:
        print_json({"folder": str(result.folder), "step": result.step, "ema": result.ema})
    return 0
