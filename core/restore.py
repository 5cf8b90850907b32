"""Rebuild a trained model from a checkpoint payload, for ``trm eval`` and ``trm solve``.

Every way a payload can be unusable (a spec that does not parse, weights of another shape,
missing or damaged EMA shadows) becomes one TrmError naming the checkpoint and the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trm.data.puzzle_dataset import METADATA_FILE
from trm.data.shape import DatasetShape, read_shape
from trm.errors import TrmError
from trm.model import EMA, build_model
from trm.spec import RunSpec, spec_from_dict
from trm.state import restore_recursion, tensor_differences

# At most this many weight problems are listed in one error line.
MAX_LISTED = 4


def _where(payload: dict[str, Any]) -> str:
    return f"checkpoint {payload.get('loaded_from') or ''}".rstrip()


def checkpoint_shape(payload: dict[str, Any]) -> DatasetShape:
    """The dataset shape a checkpoint records; TrmError when it has none."""
    try:
        return DatasetShape.from_dict(dict(payload.get("dataset_shape") or {}))
    except (TrmError, TypeError, ValueError) as exc:
        raise TrmError(
            f"the {_where(payload)} does not record its dataset shape ({exc}); "
            "it was written by an incompatible trm version"
        ) from None


def checkpoint_spec(payload: dict[str, Any]) -> RunSpec:
    """The run spec a checkpoint records; TrmError when it is missing or does not parse."""
    data = payload.get("spec")
    if not isinstance(data, dict):
        raise TrmError(
            f"the {_where(payload)} holds no readable run spec (found "
            f"{type(data).__name__}); it was not written by `trm run` or is damaged"
        )
    try:
        return spec_from_dict(data, "checkpoint spec")
    except TrmError as exc:
        raise TrmError(
            f"the {_where(payload)} records a spec this trm cannot read ({exc}); it was "
            "written by an incompatible trm version or is damaged"
        ) from None
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise TrmError(
            f"the {_where(payload)} records a spec this trm cannot read "
            f"({type(exc).__name__}: {exc}); it is damaged"
        ) from None


def _not_tensors(saved: Any, what: str) -> list[str]:
    """Problems when ``saved`` is not a table of tensors."""
    if not isinstance(saved, dict):
        return [f"its {what} are {type(saved).__name__}, not a table of tensors"]
    odd = sorted(str(k) for k, v in saved.items() if not isinstance(v, torch.Tensor))
    return [f"{what} entry {name} is not a tensor" for name in odd]


def _weight_problems(saved: Any, live: dict[str, torch.Tensor], what: str) -> list[str]:
    return _not_tensors(saved, what) or tensor_differences(saved, live)


def _refuse(payload: dict[str, Any], problems: list[str]) -> TrmError:
    shown = problems[:MAX_LISTED]
    if len(problems) > len(shown):
        shown.append(f"… and {len(problems) - len(shown)} more")
    return TrmError(
        f"the {_where(payload)} does not fit the model its own spec describes: "
        f"{'; '.join(shown)}. It is damaged or from an incompatible trm version; use another "
        "checkpoint"
    )


def restore_model(payload: dict[str, Any], device: torch.device) -> tuple[RunSpec, Any]:
    """The checkpoint's spec and its model in eval mode, with EMA weights when it has them,
    at the recursion depth it was trained with at that step (the spec's unless a schedule
    plugin changed it; see ``trm.state.restore_recursion``).

    TrmError when the payload's spec, shape, weights or EMA shadows cannot make the model.
    """
    spec = checkpoint_spec(payload)
    try:
        model = build_model(spec.arch, checkpoint_shape(payload))
    except TrmError:
        raise
    except (ValueError, TypeError, RuntimeError) as exc:
        raise TrmError(
            f"the {_where(payload)} describes a model this trm cannot build ({exc}); it is "
            "damaged or from an incompatible trm version"
        ) from None
    live = model.state_dict()
    problems = _weight_problems(payload.get("model"), live, "weights")
    if problems:
        raise _refuse(payload, problems)
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else repr(exc)
        raise _refuse(payload, [first]) from None
    ema_state = payload.get("ema")
    if ema_state is not None:
        ema = EMA(model, spec.train.ema_rate)
        shadow = ema_state.get("shadow") if isinstance(ema_state, dict) else None
        problems = _not_tensors(shadow, "EMA shadows")
        if not problems:
            tracked = {k: live[k] for k in ema.shadow if k in live}
            problems = [
                p.replace("model key", "EMA shadow")
                for p in tensor_differences(
                    {k: v for k, v in shadow.items() if k in ema.shadow}, tracked
                )
            ]
        if problems:
            raise _refuse(payload, problems)
        try:
            ema.load_state_dict(ema_state)
            ema.copy_to(model)
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise _refuse(payload, [f"EMA shadows: {exc}"]) from None
    try:
        restore_recursion(model, payload)
    except (KeyError, TypeError, ValueError) as exc:
        raise _refuse(payload, [f"recursion in force: {exc}"]) from None
    return spec, model.to(device).eval()


def check_eval_data(payload: dict[str, Any], data_dir: Path, split: str, given: bool) -> None:
    """TrmError unless ``data_dir/split`` is a split the checkpoint's model can score:
    it exists (else the splits found are listed; ``given``: the user named the split) and
    has the shape the model was built for (else the differing fields are named)."""
    _check_split(data_dir, split, given)
    _check_shape(payload, data_dir, split)


def _splits(data_dir: Path) -> list[str]:
    """Names of the sub-folders of ``data_dir`` that hold a dataset.json."""
    try:
        return sorted(p.name for p in data_dir.iterdir() if (p / METADATA_FILE).is_file())
    except OSError:
        return []


def _check_split(data_dir: Path, split: str, given: bool) -> None:
    if (data_dir / split / METADATA_FILE).is_file():
        return
    found = _splits(data_dir)
    if not found:
        raise TrmError(
            f"{data_dir} holds no dataset splits (no sub-folder with {METADATA_FILE}); "
            "give a dataset built by `trm data build` with --data DIR"
        )
    which = f"--split {split}" if given else f"the checkpoint's eval split {split!r}"
    raise TrmError(
        f"{which}: {data_dir} has no split of that name; its splits are "
        f"{', '.join(found)}; choose one with --split"
    )


def _check_shape(payload: dict, data_dir: Path, split: str) -> None:
    """TrmError naming the fields when the data is not of the shape the model was built for."""
    differences = checkpoint_shape(payload).model_differences(read_shape(data_dir, split))
    if not differences:
        return
    listed = "; ".join(
        f"{name} {mine} in the checkpoint, {theirs} in the data"
        for name, mine, theirs in differences
    )
    where = payload.get("loaded_from") or "the checkpoint"
    raise TrmError(
        f"{data_dir / split} does not fit the model of {where} ({listed}); score it on a "
        "dataset built with the same options as its training data (--data DIR), or train a "
        "model on this one"
    )


# What a shipped checkpoint holds; everything else of a run's checkpoint (optimizer states,
# the carry, RNG states, the data position, the dataset's folder) only training needs.
SHIPPED_KEYS = ("trm_version", "spec", "model", "step", "recursion", "dataset_shape")


def reduce_checkpoint(payload: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint payload reduced to what inference needs, for shipping.

    Called by benchmarks/shipped_weights.py on a run's best (else last) checkpoint. The
    model's weights are the ones :func:`restore_model` evaluates with — the EMA weights
    where the run kept an EMA — stored as ``model`` with ``ema`` None, so restoring the
    reduced payload gives the same model and the same outputs. Beside them: the spec, the
    dataset shape, the recursion in force and the step. Only tensors, dicts, lists, str,
    int, float, bool and None: it loads with ``torch.load(weights_only=True)``. TrmError
    when the payload cannot make its model (as :func:`restore_model`).
    """
    _spec, model = restore_model(payload, torch.device("cpu"))
    reduced = {key: payload.get(key) for key in SHIPPED_KEYS}
    reduced["model"] = {
        name: tensor.detach().to("cpu", copy=True).contiguous()
        for name, tensor in model.state_dict().items()
    }
    reduced["ema"] = None
    return reduced
