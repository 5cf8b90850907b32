"""A spec in and out: reading a TOML file, writing TOML text, and the plain-data form that
JSON documents and checkpoints hold. Every way in structures strictly and validates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import tomli_w

from trm.errors import TrmError
from trm.spec.checks import validate
from trm.spec.schema import MIX_SOURCE, RunSpec
from trm.spec.strict import CONVERTER, structure_strict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_spec(path: Path) -> RunSpec:
    """Read, structure and validate a TOML run spec."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TrmError(
            f"spec file {path} does not exist; give a path or a shipped spec name"
        ) from exc
    except IsADirectoryError as exc:
        raise TrmError(
            f"spec {path} is a directory; give a TOML file or a shipped spec name"
        ) from exc
    except UnicodeDecodeError as exc:
        raise TrmError(
            f"spec file {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from exc
    except OSError as exc:
        raise TrmError(f"cannot read spec file {path}: {exc.strerror}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TrmError(f"{path}: malformed TOML: {exc}") from exc
    raw.setdefault("name", path.stem)
    mark_mix(raw, str(path))
    spec = structure_strict(raw, RunSpec, str(path))
    validate(spec, str(path))
    return spec


def mark_mix(raw: dict[str, Any], where: str) -> None:
    """A spec's raw data with ``[[data.mix]]`` tables gets ``data.source = "mix"``; TrmError
    when ``[data]`` also names a source (a mix names each dataset in its own table) or when
    the mix is empty. Changes ``raw`` in place; a spec without a mix is left alone."""
    data = raw.get("data")
    if not isinstance(data, dict) or "mix" not in data:
        return
    if isinstance(data["mix"], list) and not data["mix"]:
        raise TrmError(
            f"{where}: data.mix: the mix is empty; add [[data.mix]] tables (a source or a "
            "dir, and a weight, each) or remove data.mix"
        )
    source = data.get("source", MIX_SOURCE)
    if source != MIX_SOURCE:
        raise TrmError(
            f"{where}: data.mix: [data] sets source = {source!r} as well as [[data.mix]] "
            "tables; each [[data.mix]] table names its own source (or dir): remove "
            "data.source"
        )
    data["source"] = MIX_SOURCE


def spec_to_toml(spec: RunSpec) -> str:
    """The spec as TOML text that :func:`load_spec` reads back to an equal spec."""
    return tomli_w.dumps(spec_to_dict(spec))


def spec_to_dict(spec: RunSpec) -> dict[str, Any]:
    """Plain-data form of a spec (for JSON and checkpoints); ``data.mix`` only when the spec
    has one."""
    data = CONVERTER.unstructure(spec)
    if not data["data"]["mix"]:
        del data["data"]["mix"]
    return data


def spec_from_dict(data: dict[str, Any], where: str) -> RunSpec:
    """Inverse of :func:`spec_to_dict`, with the same strict checks as loading a file."""
    if isinstance(data.get("data"), dict):
        data = {**data, "data": dict(data["data"])}  # mark_mix writes there: not the caller's
    mark_mix(data, where)
    spec = structure_strict(data, RunSpec, where)
    validate(spec, where)
    return spec
