"""``trm export RUN --format hf``: a trm checkpoint as a model folder in the Hub's layout.

Writes ``OUT/model.safetensors`` (``safetensors.torch.save_file``: no pickle), ``OUT/config.json``
and ``OUT/README.md`` (the model card, :mod:`.hf_card`); the layout is described in
:mod:`.hf_folder`. The weights are the ones ``trm solve RUN`` answers with: the newest
checkpoint's (or the checkpoint file's), the EMA copy when the run kept one
(``trm.restore.restore_model``). Each tensor is stored as its own contiguous copy, so tensors
that share memory in the model (tied weights) are written once each under their own names
and loading copies them back into the model as it builds them. The folder is assembled beside
``OUT`` and renamed into place, so a refused export writes nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from attrs import frozen

from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.model import puzzle_prefix_len
from trm.plugin_manager import TrmPluginManager
from trm.plugins.formats.exporter import load_trm_checkpoint
from trm.plugins.formats.hf_card import RunRecord, model_card, read_run_record
from trm.plugins.formats.hf_folder import (
    CARD_FILE,
    CONFIG_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    WEIGHTS_FILE,
)
from trm.plugins.formats.importer import check_output, write_folder
from trm.restore import checkpoint_shape, restore_model
from trm.spec import RunSpec, spec_to_dict
from trm.version import __version__

# The class that config.json's "architecture" names.
ARCHITECTURE = "TinyRecursiveModel"


@frozen
class HfExportResult:
    """What ``trm export --format hf`` wrote: the folder, the step of its weights and whether
    they are the EMA copy."""

    folder: Path
    step: int
    ema: bool


def model_config(
    spec: RunSpec,
    shape: DatasetShape,
    recursion: dict[str, Any],
    step: int,
    ema: bool,
    mix_layout: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """config.json: the format and its version, the architecture, the run spec (everything
    trm rebuilds the model from), the data layout (the dataset shape with the puzzle prefix's
    length), the task (the data source that parses and renders its puzzles, and the
    options that generate them), the recursion in force and the step; for a model trained
    on a multi-task mix, ``mix_layout`` (each task's tokens, row length and identifiers in
    the mix: :class:`trm.data.mix_layout.MixLayout`'s dictionary)."""
    mix = {"mix_layout": mix_layout} if mix_layout is not None else {}
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "library_name": "trm",
        "trm_version": __version__,
        "architecture": ARCHITECTURE,
        "weights": {"file": WEIGHTS_FILE, "ema": ema},
        "data_layout": {**shape.to_dict(), "puzzle_prefix_len": puzzle_prefix_len(spec.arch)},
        "task": {
            "name": spec.name,
            "source": spec.data.source,
            "generate": dict(spec.data.generate),
            "puzzle_io": (
                f"the {spec.data.source!r} data source's parse_puzzle(text, seq_len) reads a "
                "puzzle, its format_grid(tokens) writes one"
            ),
        },
        "recursion": recursion,
        "step": step,
        "spec": spec_to_dict(spec),
        **mix,
    }


def plain_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict as CPU tensors, each a contiguous copy of its own (what
    ``safetensors`` stores: it refuses tensors that share memory)."""
    return {
        name: tensor.detach().to("cpu", copy=True).contiguous()
        for name, tensor in model.state_dict().items()
    }


def export_hf(
    pm: TrmPluginManager,
    run: Path,
    out: Path,
    license_id: str | None = None,
    datasets: tuple[str, ...] = (),
) -> HfExportResult:
    """Write the newest checkpoint of ``run`` (or the checkpoint file ``run``) into ``out``
    as a model folder; see the module docstring. ``license_id`` and ``datasets`` go into the
    model card's front matter when given. TrmError, with nothing written, for bad input."""
    from safetensors.torch import save_file

    check_output(out)
    payload = load_trm_checkpoint(pm, run)
    spec, model = restore_model(payload, torch.device("cpu"))
    shape = checkpoint_shape(payload)
    step = int(payload.get("step") or 0)
    ema = payload.get("ema") is not None or payload.get("exported_ema") is True
    config = model_config(
        spec, shape, model.recursion_in_force(), step, ema, payload.get("mix_layout")
    )
    record: RunRecord = read_run_record(run, step, spec.data.eval_split)
    card = model_card(spec, shape, record, step, ema, license_id, datasets)
    weights = plain_tensors(model)
    try:
        text = json.dumps(config, indent=2, allow_nan=False) + "\n"
    except ValueError as exc:  # a value JSON cannot hold (nan, inf) in the spec
        raise TrmError(f"the checkpoint's spec cannot be written as JSON ({exc})") from None

    def write(staging: Path) -> None:
        (staging / CONFIG_FILE).write_text(text, encoding="utf-8")
        (staging / CARD_FILE).write_text(card, encoding="utf-8")
        save_file(weights, str(staging / WEIGHTS_FILE), metadata={"format": "pt"})
        # safetensors creates its file readable by its owner only; give it the permissions
        # every other file of the folder has (the umask's), so a shared copy is readable
        os.chmod(staging / WEIGHTS_FILE, (staging / CONFIG_FILE).stat().st_mode & 0o777)

    write_folder(out, "exporting", write)
    return HfExportResult(out, step, ema)
