"""``trm run SPEC --init-from CHECKPOINT``: a new run that starts from trained weights.

``CHECKPOINT`` is a trm checkpoint (a file or a run directory: its EMA weights when it has
them, as ``trm eval`` scores them), a whole model of a format a plugin offers (a model
folder ``trm export --format hf`` wrote), or weights a format reads (the reference's
``step_N`` file or its folder, with or without ``_orig_mod.``), found through
:mod:`trm.formats`. Only the weights are taken: the optimizers, the schedule, the
step and the data order start afresh, and the EMA starts from the loaded weights. Every
tensor must have the shape this run's spec gives it, except the puzzle-embedding table: when
its rows differ (another dataset), every row becomes the mean row, the reference's rule
(``load_checkpoint`` in its pretrain.py). A run that resumes its own checkpoint ignores
``--init-from``. :func:`check_init_from` refuses weights that cannot start the run before the
run directory, its lock or its data are created.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from trm.checkpoint_file import load_weights_only
from trm.errors import TrmError
from trm.formats import format_weights, whole_model_format
from trm.model import EMA, build_model
from trm.plan.dataset import dataset_shape
from trm.plan.run_dir import inspect_run_dir
from trm.plugin_manager import TrmPluginManager
from trm.restore import restore_model
from trm.spec import RunSpec
from trm.state import TrainState

Log = Callable[[str], None]
# The puzzle-embedding table: the one tensor whose rows may differ (the mean-row rule).
PUZZLE_TABLE = "puzzle_emb.weights"
# At most this many problems are listed in one message.
MAX_LISTED = 6
HINT = "give a trm checkpoint, a run directory or the weights file of a format trm reads"


def read_weights(pm: TrmPluginManager, path: Path) -> tuple[dict[str, Tensor], str]:
    """trm-named weights of the checkpoint ``path`` and what they are, in words: a trm
    checkpoint or run directory, a whole model of a format (``ModelFormat.is_model``), or
    weights a format reads (``ModelFormat.read_weights``; the reference's ``step_N``)."""
    whole = whole_model_format(pm, path)
    if whole is not None:
        _, model = restore_model(whole.read_payload(path), torch.device("cpu"))
        return model.state_dict(), f"the weights of {whole.noun} {path}"
    loaded = None
    if path.is_dir() and (path / "checkpoints").is_dir():
        loaded = pm.hook.load_checkpoint(path=path, map_location="cpu")
        if loaded is None:
            raise TrmError(f"--init-from {path}: the run directory holds no checkpoint")
    elif not path.is_dir():
        loaded = load_weights_only(path, "--init-from checkpoint", HINT)
    if isinstance(loaded, dict) and "spec" in loaded and "model" in loaded:
        if not path.is_dir():  # checked (SHA-256 record) as trm's own loader does
            loaded = pm.hook.load_checkpoint(path=path, map_location="cpu")
        _, model = restore_model(loaded, torch.device("cpu"))
        what = "EMA weights" if loaded.get("ema") is not None else "weights"
        return model.state_dict(), f"the {what} of trm checkpoint {loaded.get('loaded_from')}"
    found = format_weights(pm, path, loaded)
    if found is None:
        raise TrmError(
            f"--init-from {path}: neither a trm checkpoint nor the weights of a format the "
            "installed plugins read (`trm export --help` lists them)"
        )
    return found


def mean_row_table(table: Tensor, rows: int) -> Tensor:
    """The reference's rule for a puzzle table of another size: every one of ``rows`` rows is
    the mean row of ``table`` (``load_checkpoint`` in its pretrain.py)."""
    return table.mean(dim=0, keepdim=True).expand(rows, table.shape[1]).contiguous()


def fit_weights(
    weights: dict[str, Tensor], live: dict[str, Tensor], where: str
) -> tuple[dict[str, Tensor], str | None]:
    """``weights`` shaped for the model whose state dict is ``live``: the puzzle table by the
    mean-row rule when only its rows differ (the line saying so is returned). TrmError
    listing every other missing, unexpected or wrongly shaped tensor.

    A puzzle table of zeros where the model has none is left out: it is what ``trm export``
    writes for ``puzzle_emb_ndim = 0`` in the reference format, so an exported run seeds its
    own spec again."""
    note = None
    table = weights.get(PUZZLE_TABLE)
    if table is not None and PUZZLE_TABLE not in live and not table.any():
        weights = {k: v for k, v in weights.items() if k != PUZZLE_TABLE}
        note = (
            "init-from: the checkpoint's zero puzzle table (what trm export writes for "
            "puzzle_emb_ndim = 0) is left out: this run has no puzzle table"
        )
    problems = [f"{k} is missing" for k in sorted(set(live) - set(weights))]
    problems += [f"unexpected {k}" for k in sorted(set(weights) - set(live))]
    fitted = {}
    for key in sorted(set(weights) & set(live)):
        tensor, want = weights[key], live[key]
        if not tensor.is_floating_point():
            problems.append(f"{key} holds {tensor.dtype}, not weights")
            continue
        if tensor.shape != want.shape:
            same_width = tensor.ndim == 2 and tensor.shape[1:] == want.shape[1:]
            if key == PUZZLE_TABLE and same_width:
                tensor = mean_row_table(tensor.float(), want.shape[0])
                note = (
                    f"init-from: the puzzle table has {weights[key].shape[0]} rows, this run's "
                    f"dataset {want.shape[0]} identifiers: every row starts as the mean row "
                    "(the reference's rule)"
                )
            else:
                problems.append(f"{key}: shape {list(tensor.shape)}, this run's {list(want.shape)}")
                continue
        fitted[key] = tensor.to(want.dtype)
    if problems:
        shown = problems[:MAX_LISTED] + (
            [f"… and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else []
        )
        raise TrmError(
            f"--init-from {where} does not fit this run's model: {'; '.join(shown)}; give a "
            "spec whose [arch] matches the checkpoint's"
        )
    return fitted, note


def check_init_from(
    pm: TrmPluginManager, path: Path, spec: RunSpec, run_dir: Path, resume: str
) -> None:
    """TrmError, before anything is written, unless the weights of ``path`` can start
    ``spec``'s model as :func:`start_from_weights` will: a checkpoint that reads, whose
    tensors are weights of the shapes the spec as written gives them (the puzzle table by the
    mean-row rule). Nothing is checked when the run will resume instead (``resume`` a path,
    or "auto" with checkpoints in ``run_dir``): ``--init-from`` is then ignored."""
    if resume not in ("auto", "never"):
        return
    if resume == "auto" and inspect_run_dir(run_dir).checkpoint_steps:
        return
    try:
        weights, _ = read_weights(pm, path)
    except TrmError as exc:  # say which option gave the file, once
        said = str(exc)
        raise TrmError(said if "--init-from" in said else f"--init-from {path}: {said}") from None
    shape = dataset_shape(pm, spec, run_dir)  # never builds into run_dir
    with torch.device("meta"):
        live = build_model(spec.arch, shape).state_dict()
    fit_weights(weights, live, str(path))


def start_from_weights(state: TrainState, pm: TrmPluginManager, path: Path, log: Log) -> None:
    """Load the weights of ``path`` into a fresh ``state`` (see the module docstring); a
    state resumed from its own checkpoint is left alone. TrmError when they do not fit."""
    if state.checkpoint_step is not None:
        log(f"--init-from {path} ignored: the run resumed its own checkpoint (step {state.step})")
        return
    weights, what = read_weights(pm, path)
    fitted, note = fit_weights(weights, state.model.state_dict(), str(path))
    state.model.load_state_dict(fitted)
    if state.ema is not None:
        state.ema = EMA(state.model, state.spec.train.ema_rate)
    log(f"init-from: starting from {what}; fresh optimizers and schedule at step 0")
    if note is not None:
        log(note)
