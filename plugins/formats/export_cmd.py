"""``trm export RUN_DIR --format NAME --out DIR``: a trm run's newest checkpoint (or a
checkpoint file) written in a model format a plugin offers (``register_formats``): the
built-in ``reference`` (the reference implementation's ``step_N`` and ``all_config.yaml``),
``hf`` (a model folder in the Hugging Face Hub's layout — ``model.safetensors``,
``config.json``, a README.md model card) and ``onnx`` (an ONNX solver, the ``onnx``
plugin's). Each format adds its own options. See docs/interop.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from trm.cli.common import out_folder
from trm.cli.output import info, print_json
from trm.errors import TrmError
from trm.formats import ExportOptions, ModelFormat, model_formats
from trm.plugin_manager import TrmPluginManager, load_plugins


def register(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser, pm: TrmPluginManager
) -> None:
    formats = model_formats(pm)
    parser = commands.add_parser(
        "export",
        parents=[common],
        help="write a model in another format (--format: see trm export --help)",
    )
    parser.add_argument(
        "run",
        type=Path,
        help="a run directory, a checkpoint file, a model folder or a shipped model's name",
    )
    parser.add_argument(
        "--format",
        choices=[fmt.name for fmt in formats],
        required=True,
        help="the layout to write: " + "; ".join(f"{fmt.name}: {fmt.summary}" for fmt in formats),
    )
    parser.add_argument("--out", type=out_folder, required=True, help="a new folder for the files")
    owners: dict[str, tuple[ModelFormat, list[argparse.Action]]] = {}  # each one's options
    for fmt in formats:
        options = ExportOptions(parser.add_argument)
        fmt.add_export_options(options)
        owners[fmt.name] = (fmt, options.actions)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run, export_options=owners)


def _refuse_other_formats_options(args: argparse.Namespace) -> None:
    """TrmError when an option of another format than ``--format`` was given."""
    for fmt, actions in args.export_options.values():
        if fmt.name == args.format:
            continue
        given = [a.option_strings[0] for a in actions if getattr(args, a.dest) != a.default]
        if given:
            raise TrmError(fmt.foreign_options_message(given))


def run(args: argparse.Namespace) -> int:
    _refuse_other_formats_options(args)
    pm = load_plugins(args.plugins)
    chosen = {fmt.name: fmt for fmt in model_formats(pm)}.get(args.format)
    if chosen is None:
        raise TrmError(f"--format {args.format}: no enabled plugin offers it")
    result = chosen.export(pm, args.run, args.out, args)
    for line in result.lines:
        info(line)
    if args.json:
        print_json(result.document)
    return 0
