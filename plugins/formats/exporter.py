"""``trm export RUN --format reference``: a trm checkpoint in the reference's layout.

Writes ``OUT/step_N`` — ``torch.save`` of the state dict under the reference's keys, with
``_orig_mod.`` in front as a compiled reference run saves them (``compiled=False``: without,
for ``DISABLE_COMPILE``), holding the EMA weights when the run has EMA, as the reference
saves — and ``OUT/all_config.yaml`` (:func:`~.reference_config.reference_config`), whose
``load_checkpoint`` names that file. The folder is assembled beside ``OUT`` and renamed into
place, so a refused export writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from attrs import frozen

from trm.errors import TrmError
from trm.plugin_manager import TrmPluginManager
from trm.plugins.formats.hf_folder import is_model_folder, read_model_folder
from trm.plugins.formats.importer import check_output, write_folder
from trm.plugins.formats.reference_config import (
    CONFIG_FILE,
    FORWARD_DTYPES,
    needs_zero_table,
    reference_config,
    write_config,
)
from trm.plugins.formats.reference_weights import (
    INIT_STATES,
    PUZZLE_TABLE,
    to_reference_weights,
)
from trm.restore import checkpoint_shape, restore_model
from trm.shipped import looks_like_a_name, shipped_checkpoint, shipped_names

Log = Callable[[str], None]
FORMATS = ("reference", "hf")


@frozen
class ExportResult:
    """What ``trm export`` wrote: the checkpoint file, the config and the notes shown."""

    checkpoint: Path
    config: Path
    step: int
    notes: tuple[str, ...]


def load_trm_checkpoint(pm: TrmPluginManager, path: Path) -> dict:
    """The trm checkpoint ``path`` names (a file, a run directory's newest, a model folder
    ``trm export --format hf`` wrote, or a shipped model's name: its file, checked against
    its manifest); TrmError when there is none."""
    if not path.exists() and looks_like_a_name(str(path)):
        path = shipped_checkpoint(str(path))
    if not path.exists():
        names = ", ".join(shipped_names()) or "none"
        raise TrmError(
            f"{path} does not exist; give a run directory, a checkpoint file or a shipped "
            f"model's name ({names})"
        )
    if is_model_folder(path):
        return read_model_folder(path)
    payload = pm.hook.load_checkpoint(path=path, map_location="cpu")
    if payload is None:
        raise TrmError(
            f"no checkpoint found at {path}: the folder holds no checkpoints/step-*.pt files; "
            "give the directory of a `trm run` or `trm import`"
        )
    return payload


def export_reference(
    pm: TrmPluginManager, run: Path, out: Path, compiled: bool = True
) -> ExportResult:
    """Write the newest checkpoint of ``run`` (or the checkpoint file ``run``) into ``out``
    in the reference's layout; see the module docstring. TrmError for bad input."""
    check_output(out)
    payload = load_trm_checkpoint(pm, run)
    spec, model = restore_model(payload, torch.device("cpu"))
    shape = checkpoint_shape(payload)
    step = int(payload.get("step") or 0)
    weights = {k: v for k, v in model.state_dict().items()}
    notes: list[str] = []
    if needs_zero_table(spec):
        weights[PUZZLE_TABLE] = torch.zeros(shape.num_puzzle_identifiers, spec.arch.hidden_size)
    init_dtype = getattr(torch, FORWARD_DTYPES.get(spec.runtime.precision, "bfloat16"))
    if any((weights[k].to(init_dtype).float() != weights[k]).any() for k in INIT_STATES):
        notes.append(
            f"H_init and L_init are rounded to {init_dtype} (the reference keeps them in its "
            "forward dtype; runtime.precision = 'fp32' exports them exactly)"
        )
    in_force = model.recursion_in_force()
    if (in_force["H_cycles"], in_force["L_cycles"]) != (spec.arch.H_cycles, spec.arch.L_cycles):
        notes.append(
            f"a schedule had set H_cycles={in_force['H_cycles']}, L_cycles="
            f"{in_force['L_cycles']} at this step; the config keeps the spec's "
            f"{spec.arch.H_cycles} and {spec.arch.L_cycles}"
        )
    name = f"step_{step}"
    exported = reference_config(
        spec, str(payload.get("data_dir") or ""), shape.rows_per_epoch, str(out.resolve() / name)
    )
    state = to_reference_weights(weights, init_dtype, compiled)

    def write(staging: Path) -> None:
        torch.save(state, staging / name)
        write_config(exported.config, staging / CONFIG_FILE)

    write_folder(out, "exporting", write)
    return ExportResult(out / name, out / CONFIG_FILE, step, (*exported.notes, *notes))
