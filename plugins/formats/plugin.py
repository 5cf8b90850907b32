"""The built-in model formats and the commands that read and write them: ``reference`` (the
reference implementation's ``step_N`` + ``all_config.yaml``) and ``hf`` (a model folder in
the Hugging Face Hub's layout), ``trm import`` and ``trm export``.

Importing this module is cheap (``trm --help`` does): the conversions, torch and
safetensors load when a format is used.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from trm.errors import TrmError
from trm.formats import Exported, ExportOptions, ModelFormat
from trm.hookspecs import hookimpl
from trm.plugin_manager import TrmPluginManager

ACTIVATION = "default"


class ReferenceFormat(ModelFormat):
    """The reference implementation's checkpoint: ``step_N`` and ``all_config.yaml``."""

    name = "reference"
    summary = "the reference implementation's step_N and all_config.yaml"
    noun = "reference checkpoint"

    def add_export_options(self, options: ExportOptions) -> None:
        options.add_argument(
            "--uncompiled",
            action="store_true",
            help="keys without _orig_mod. (for the reference run with DISABLE_COMPILE=1)",
        )

    def export(
        self, pm: TrmPluginManager, source: Path, out: Path, options: argparse.Namespace
    ) -> Exported:
        from trm.plugins.formats.exporter import export_reference

        result = export_reference(pm, source, out, compiled=not options.uncompiled)
        command = ["python", "pretrain.py", f"load_checkpoint={result.checkpoint}"]
        prefix = "DISABLE_COMPILE=1 " if options.uncompiled else ""
        lines = (
            *result.notes,
            f"wrote {result.checkpoint} and {result.config}",
            f"the reference continues it with: {prefix}{shlex.join(command)} plus the arch and "
            f"training keys of {result.config.name} (see docs/interop.md)",
        )
        document = {
            "checkpoint": str(result.checkpoint),
            "config": str(result.config),
            "step": result.step,
            "notes": list(result.notes),
        }
        return Exported(lines, document)

    def read_weights(self, path: Path, loaded: Any) -> tuple[dict[str, Any], str] | None:
        """A reference ``step_N`` file (``loaded``), or the folder holding one."""
        from trm.plugins.formats.importer import find_checkpoint
        from trm.plugins.formats.reference_weights import (
            INNER_PREFIX,
            as_state_dict,
            is_reference_state,
            load_torch_file,
            strip_compiled_prefix,
            trm_key,
        )

        if loaded is None:  # a reference run's folder
            path = find_checkpoint(path)
            loaded = load_torch_file(path, "--init-from checkpoint")
        state = as_state_dict(loaded, path)
        if not is_reference_state(state):
            return None
        state, _ = strip_compiled_prefix(state, path)
        odd = [k for k in state if not k.startswith(INNER_PREFIX)]
        if odd:
            raise TrmError(f"--init-from {path}: unexpected key {odd[0]} in a reference state dict")
        weights = {trm_key(k.removeprefix(INNER_PREFIX)): v for k, v in state.items()}
        return weights, f"the weights of reference checkpoint {path}"


class HfFormat(ModelFormat):
    """A model folder in the Hugging Face Hub's layout: ``model.safetensors``,
    ``config.json`` and a README.md model card, read back with json and safetensors only."""

    name = "hf"
    summary = "a Hugging Face model folder (model.safetensors, config.json, README.md)"
    noun = "model folder"

    def add_export_options(self, options: ExportOptions) -> None:
        options.add_argument(
            "--license", help="--format hf: the license the model card names (e.g. apache-2.0)"
        )
        options.add_argument(
            "--dataset",
            action="append",
            default=[],
            help="--format hf: a Hub dataset the model card names (repeatable)",
        )
        options.add_argument(
            "--push-to-hub",
            metavar="REPO",
            help="--format hf: then upload the folder to the Hub model repo REPO (OWNER/NAME; "
            "created when missing) with huggingface_hub's upload_folder, as `hf auth login` "
            "allows",
        )

    def foreign_options_message(self, given: list[str]) -> str:
        return (
            "--license and --dataset describe a model card and --push-to-hub shares it: use "
            f"them with --format hf (given: {' '.join(given)})"
        )

    def export(
        self, pm: TrmPluginManager, source: Path, out: Path, options: argparse.Namespace
    ) -> Exported:
        from trm.plugins.formats.hf_export import export_hf
        from trm.plugins.formats.hf_hub import check_repo_id, push_folder

        repo = check_repo_id(options.push_to_hub) if options.push_to_hub else None
        result = export_hf(pm, source, out, options.license, tuple(options.dataset))
        weights = "EMA weights" if result.ema else "weights"
        document = {"folder": str(result.folder), "step": result.step, "ema": result.ema}
        lines = [f"wrote {result.folder} ({weights} of step {result.step})"]
        if repo is None:
            lines.append(
                f"share it with: hf upload USER/NAME {result.folder} (or export with "
                "--push-to-hub USER/NAME)"
            )
        else:
            document["pushed"] = push_folder(result.folder, repo)
            lines.append(f"uploaded to the Hub: {document['pushed']}")
        return Exported(tuple(lines), document)

    def locate(self, name: str) -> Path | None:
        """A Hub repo id ``owner/name`` as its snapshot in the local Hugging Face cache."""
        if name.count("/") != 1:
            return None
        from trm.plugins.formats.hf_hub import cached_folder

        return cached_folder(name)

    def is_model(self, path: Path) -> bool:
        from trm.plugins.formats.hf_folder import is_model_folder

        return is_model_folder(path)

    def read_payload(self, path: Path) -> dict[str, Any]:
        from trm.plugins.formats.hf_folder import read_model_folder

        return read_model_folder(path)


@hookimpl
def register_formats() -> list[ModelFormat]:
    return [ReferenceFormat(), HfFormat()]


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser, pm: TrmPluginManager
) -> None:
    from trm.plugins.formats import export_cmd, import_cmd

    import_cmd.register(commands, common)
    export_cmd.register(commands, common, pm)
