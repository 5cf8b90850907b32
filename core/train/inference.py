"""Rebuild a trained model from a checkpoint payload, for ``trm eval`` and ``trm solve``."""

from __future__ import annotations

from typing import Any

import torch

from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.model import EMA, build_model
from trm.spec import RunSpec, spec_from_dict


def checkpoint_shape(payload: dict[str, Any]) -> DatasetShape:
    """The dataset shape a checkpoint records; TrmError when it has none."""
    try:
        return DatasetShape.from_dict(dict(payload.get("dataset_shape") or {}))
    except (TrmError, TypeError, ValueError) as exc:
        raise TrmError(
            f"the checkpoint does not record its dataset shape ({exc}); "
            "it was written by an incompatible trm version"
        ) from None


def restore_model(payload: dict[str, Any], device: torch.device) -> tuple[RunSpec, Any]:
    """The checkpoint's spec and its model in eval mode, with EMA weights when it has them."""
    spec = spec_from_dict(payload["spec"], "checkpoint spec")
    model = build_model(spec.arch, checkpoint_shape(payload))
    model.load_state_dict(payload["model"])
    if payload.get("ema") is not None:
        ema = EMA(model, spec.train.ema_rate)
        ema.load_state_dict(payload["ema"])
        ema.copy_to(model)
    return spec, model.to(device).eval()
