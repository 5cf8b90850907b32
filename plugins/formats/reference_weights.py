"""The reference's state-dict layout, and safe reading of its checkpoint files.

The reference saves ``torch.save(model.state_dict())`` of its loss head, which wraps the ACT
model as ``model`` and the network as ``model.inner``; a compiled run (the default) adds
``_orig_mod.`` in front of every key. trm's :class:`~trm.model.TinyRecursiveModel` holds the
same tensors under shorter names::

    reference (after model.inner.)                trm
    embed_tokens.embedding_weight   [vocab, D]    embed_tokens.weight
    embed_pos.embedding_weight      [P, D]        embed_pos.weight          (learned positions)
    puzzle_emb.weights              [ids, ndim]   puzzle_emb.weights        (puzzle_emb_ndim > 0)
    L_level.layers.i.self_attn.qkv_proj.weight    net.layers.i.self_attn.qkv.weight
    L_level.layers.i.self_attn.o_proj.weight      net.layers.i.self_attn.o.weight
    L_level.layers.i.mlp_t.gate_up_proj.weight    net.layers.i.mlp_t.gate_up.weight  (mlp_t)
    L_level.layers.i.mlp_t.down_proj.weight       net.layers.i.mlp_t.down.weight
    L_level.layers.i.mlp.gate_up_proj.weight      net.layers.i.mlp.gate_up.weight
    L_level.layers.i.mlp.down_proj.weight         net.layers.i.mlp.down.weight
    lm_head.weight, q_head.weight, q_head.bias    the same
    H_init, L_init                  [D]           the same (the reference keeps them in
                                                  forward_dtype, trm in float32)

The rotary tables are not saved by either. Both pack attention's projection as [q; k; v]
rows of ``num_heads x head_dim`` each, so no tensor is reshaped, only renamed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trm.checkpoint_file import load_weights_only
from trm.errors import TrmError

COMPILED_PREFIX = "_orig_mod."
INNER_PREFIX = "model.inner."
# trm's name of a module -> the reference's (dotted components; see the module docstring)
_MODULE_NAMES = {
    "net": "L_level",
    "qkv": "qkv_proj",
    "o": "o_proj",
    "gate_up": "gate_up_proj",
    "down": "down_proj",
}
_TRM_NAMES = {ref: ours for ours, ref in _MODULE_NAMES.items()}
_EMBEDDINGS = ("embed_tokens", "embed_pos")
# The buffers the reference keeps in its forward dtype.
INIT_STATES = ("H_init", "L_init")
PUZZLE_TABLE = "puzzle_emb.weights"
# At most this many key problems are listed in one error line.
MAX_LISTED = 6


def reference_key(trm_key: str) -> str:
    """The reference's key (after ``model.inner.``) of a trm state-dict key."""
    parts = trm_key.split(".")
    if len(parts) == 2 and parts[0] in _EMBEDDINGS and parts[1] == "weight":
        return f"{parts[0]}.embedding_weight"
    return ".".join(_MODULE_NAMES.get(p, p) if not p.isdigit() else p for p in parts)


def trm_key(reference: str) -> str:
    """Inverse of :func:`reference_key`."""
    parts = reference.split(".")
    if len(parts) == 2 and parts[0] in _EMBEDDINGS and parts[1] == "embedding_weight":
        return f"{parts[0]}.weight"
    return ".".join(_TRM_NAMES.get(p, p) if not p.isdigit() else p for p in parts)


def _listed(problems: list[str]) -> str:
    shown = problems[:MAX_LISTED]
    if len(problems) > len(shown):
        shown.append(f"… and {len(problems) - len(shown)} more")
    return "; ".join(shown)


def load_torch_file(path: Path, what: str) -> Any:
    """What the reference's file ``path`` holds, loaded on the CPU with the refusals of
    :func:`trm.checkpoint_file.load_weights_only`, ``what`` naming it in messages."""
    return load_weights_only(path, what, "give the step_N file the run saved")


def as_state_dict(value: Any, path: Path) -> dict[str, Tensor]:
    """``value`` as a table of tensors by name; TrmError when it is something else."""
    if not isinstance(value, Mapping) or not value:
        kind = "an empty table" if isinstance(value, Mapping) else type(value).__name__
        raise TrmError(
            f"checkpoint {path} is a PyTorch file but not a state dict (it holds {kind}); give "
            "the step_N file of a reference run"
        )
    odd = sorted(
        str(k) for k, v in value.items() if not isinstance(k, str) or not torch.is_tensor(v)
    )
    if odd:
        raise TrmError(
            f"checkpoint {path} is not a state dict: entry {odd[0]} is not a named tensor; "
            "give the step_N file of a reference run"
        )
    return dict(value)


def is_reference_state(state: Mapping[str, Any]) -> bool:
    """True when the keys are the reference's (``model.inner.``, possibly compiled)."""
    return any(
        isinstance(k, str) and k.removeprefix(COMPILED_PREFIX).startswith(INNER_PREFIX)
        for k in state
    )


def strip_compiled_prefix(state: dict[str, Tensor], path: Path) -> tuple[dict[str, Tensor], bool]:
    """The state without ``_orig_mod.`` (a compiled run's prefix) and whether it had one;
    TrmError when only some keys carry it."""
    prefixed = [k for k in state if k.startswith(COMPILED_PREFIX)]
    if not prefixed:
        return state, False
    if len(prefixed) != len(state):
        plain = next(k for k in state if not k.startswith(COMPILED_PREFIX))
        raise TrmError(
            f"checkpoint {path} mixes keys with and without {COMPILED_PREFIX!r} (e.g. {plain}); "
            "it is not one model's state dict"
        )
    return {k.removeprefix(COMPILED_PREFIX): v for k, v in state.items()}, True


def to_trm_weights(
    state: dict[str, Tensor], live: Mapping[str, Tensor], path: Path
) -> dict[str, Tensor]:
    """The reference state dict ``state`` (prefix stripped) under trm's names, in the dtypes
    of ``live`` (the state dict of the trm model the config describes).

    TrmError listing every missing, unexpected or wrongly shaped key (in the reference's
    names) when the weights are not those of that model.
    """
    expected = {INNER_PREFIX + reference_key(k): k for k in live}
    problems = [f"key {k} is missing" for k in sorted(set(expected) - set(state))]
    problems += [f"unexpected key {k}" for k in sorted(set(state) - set(expected))]
    for key in sorted(set(state) & set(expected)):
        tensor, want = state[key], live[expected[key]]
        if tuple(tensor.shape) != tuple(want.shape):
            problems.append(
                f"{key} has shape {list(tensor.shape)}, the config's model needs {list(want.shape)}"
            )
        elif not tensor.is_floating_point():
            problems.append(f"{key} holds {tensor.dtype}, not floating-point weights")
    if problems:
        raise TrmError(
            f"checkpoint {path} does not fit the model its all_config.yaml describes: "
            f"{_listed(problems)}. Give the config saved with these weights (--config)"
        )
    return {ours: state[ref].to(live[ours].dtype).clone() for ref, ours in expected.items()}


def to_reference_weights(
    weights: Mapping[str, Tensor], init_dtype: torch.dtype, compiled: bool
) -> dict[str, Tensor]:
    """trm's ``weights`` under the reference's keys (``_orig_mod.`` in front when
    ``compiled``), H_init/L_init in ``init_dtype`` (the reference's forward dtype), the rest
    as they are; contiguous CPU copies."""
    prefix = (COMPILED_PREFIX if compiled else "") + INNER_PREFIX
    out = {}
    for key, tensor in weights.items():
        tensor = tensor.detach().cpu()
        if key in INIT_STATES:
            tensor = tensor.to(init_dtype)
        out[prefix + reference_key(key)] = tensor.contiguous().clone()
    return out
