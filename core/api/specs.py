"""The spec argument every API function takes: a shipped name, a TOML path or a RunSpec."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trm.errors import TrmError
from trm.spec import RunSpec, apply_overrides, load_spec, resolve_spec_path, validate

SpecLike = str | Path | RunSpec


def read_spec(spec: SpecLike, overrides: Iterable[str] = ()) -> RunSpec:
    """``spec`` loaded (a name or a path, as ``trm run SPEC`` reads it) or checked (a
    :class:`RunSpec`), then the ``--set`` ``overrides`` applied; TrmError for bad input,
    with the message ``trm run`` gives."""
    if isinstance(spec, RunSpec):
        validate(spec, "the spec given")
        loaded = spec
    elif isinstance(spec, (str, Path)):
        loaded = load_spec(resolve_spec_path(str(spec)))
    else:
        raise TrmError(
            f"spec must be a shipped spec's name, a TOML path or a trm.spec.RunSpec, "
            f"not {type(spec).__name__}"
        )
    return apply_overrides(loaded, list(overrides))
