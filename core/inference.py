"""Rebuild a trained model from a checkpoint payload, for ``trm eval`` and ``trm solve``."""

from __future__ import annotations

from typing import Any

import torch

from trm.errors import TrmError
from trm.spec import RunSpec, spec_from_dict
from trm.train import build_model


def restore_model(payload: dict[str, Any], device: torch.device) -> tuple[RunSpec, Any]:
    """The checkpoint's spec and its model in eval mode, with EMA weights when it has them."""
    spec = spec_from_dict(payload["spec"], "checkpoint spec")
    shape = payload.get("dataset_shape")
    if not shape:
        raise TrmError(
            "the checkpoint does not record its dataset shape; "
            "it was written by an incompatible trm version"
        )
    model = build_model(spec, shape)
    model.load_state_dict(payload["model"])
    if payload.get("ema") is not None:
        from trm.model import EMA

        ema = EMA(model, spec.train.ema_rate)
        ema.load_state_dict(payload["ema"])
        ema.copy_to(model)
    return spec, model.to(device).eval()
