"""A model folder in the Hugging Face Hub's layout, read back with no pickle involved.

``trm export RUN --format hf`` writes (:mod:`.hf_export`):

    DIR/model.safetensors  the weights trm evaluates with (the EMA copy when the run kept one)
    DIR/config.json        the architecture, the data layout, the task and the step
    DIR/README.md          the model card

:func:`is_model_folder` tells such a folder from a run directory (which has ``checkpoints/``)
and a reference checkpoint's folder (``step_N`` + ``all_config.yaml``); :func:`read_model_folder`
turns it into the payload a reduced checkpoint holds (``trm.restore.reduce_checkpoint``), so
``trm.restore.restore_model`` rebuilds the model from it as from any checkpoint. Reading uses
``json`` and ``safetensors.torch.load_file`` only, never ``torch.load``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trm.errors import TrmError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"
# ``config.json``'s "format": what says the folder is a trm model's.
FORMAT_NAME = "trm"
# The layout's version; a reader refuses a higher one (written by a newer trm).
FORMAT_VERSION = 1
# The keys of config.json a reader needs.
REQUIRED_KEYS = ("spec", "data_layout", "recursion", "step")


def is_model_folder(path: Path) -> bool:
    """True when ``path`` is a folder holding ``config.json`` and no run's ``checkpoints/``:
    a model folder as :mod:`.hf_export` writes it (or a damaged one, which
    :func:`read_model_folder` names)."""
    return path.is_dir() and (path / CONFIG_FILE).is_file() and not (path / "checkpoints").is_dir()


def read_config(folder: Path) -> dict[str, Any]:
    """The checked ``config.json`` of the model folder ``folder``.

    TrmError when it cannot be read, is not a JSON object, is not a trm model's config
    (another library's ``config.json``), has a format version this trm does not know (a
    newer trm wrote it), or lacks a key a reader needs."""
    path = folder / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrmError(f"{path} cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise TrmError(f"{path} is not valid JSON ({exc}); it is damaged") from None
    if not isinstance(data, dict):
        raise TrmError(f"{path} holds {type(data).__name__}, not a JSON object; it is damaged")
    if data.get("format") != FORMAT_NAME:
        raise TrmError(
            f'{path} is not a trm model\'s config (its "format" is {data.get("format")!r}, not '
            f"{FORMAT_NAME!r}); give a folder written by `trm export RUN --format hf`"
        )
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TrmError(f"{path}: format_version {version!r} is not a version number; it is damaged")
    if version > FORMAT_VERSION:
        raise TrmError(
            f"{path} is of format version {version}, newer than the {FORMAT_VERSION} this trm "
            f"reads (written by trm {data.get('trm_version', '?')}); upgrade trm to load it"
        )
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise TrmError(f"{path} lacks {', '.join(missing)}; it is damaged")
    return data


def read_weights(folder: Path) -> dict[str, Any]:
    """The tensors of ``folder/model.safetensors`` on the CPU (``safetensors`` only).

    TrmError when the file is missing or is not a safetensors file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise TrmError(
            f"{folder} holds {CONFIG_FILE} but no {WEIGHTS_FILE}; copy the whole folder "
            "`trm export RUN --format hf` wrote (or download every file of the model)"
        )
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrmError(f"{path} cannot be read as safetensors ({first}); it is damaged") from None


def read_model_folder(folder: Path) -> dict[str, Any]:
    """The checkpoint payload of the model folder ``folder``: ``spec``, ``model`` (the
    weights), ``ema`` None, ``dataset_shape``, ``recursion``, ``step``, ``trm_version`` and
    ``loaded_from``, the keys ``trm.restore.restore_model`` reads, and ``exported_ema``:
    whether the weights are a run's EMA copy (config.json's ``weights.ema``). The weights' names and
    shapes are checked there, against the model the spec describes. TrmError as
    :func:`read_config` and :func:`read_weights`."""
    config = read_config(folder)
    layout = config["data_layout"]
    if not isinstance(layout, dict):
        raise TrmError(f"{folder / CONFIG_FILE}: data_layout is not a JSON object; it is damaged")
    step = config["step"]
    weights = config.get("weights")
    return {
        "trm_version": config.get("trm_version"),
        "spec": config["spec"],
        "model": read_weights(folder),
        "ema": None,
        "step": step if isinstance(step, int) else None,
        "recursion": config["recursion"],
        "dataset_shape": {k: v for k, v in layout.items() if k != "puzzle_prefix_len"},
        "data_dir": None,
        "exported_ema": isinstance(weights, dict) and weights.get("ema") is True,
        "loaded_from": str(folder),
        **({"mix_layout": config["mix_layout"]} if config.get("mix_layout") else {}),
    }
