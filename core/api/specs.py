"""The spec argument every API function takes: a shipped name, a TOML path or a RunSpec."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from trm.errors import TrmError
from trm.spec import RunSpec, apply_overrides, load_spec, resolve_spec_path, validate

if TYPE_CHECKING:
    from trm.plugin_manager import TrmPluginManager

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


def check_spec_with_plugins(pm: TrmPluginManager, spec: RunSpec) -> None:
    """Refuse ``spec`` as ``trm run`` does before it writes anything: a device no backend
    claims, an optimizer no enabled plugin offers (or whose build cannot work), a
    ``[plugins.NAME]`` table naming no installed plugin, then every enabled plugin's
    ``check_spec``. TrmError naming the key path; nothing is built or written."""
    from trm.plan.pipeline import check_spec

    check_spec(pm, spec)
