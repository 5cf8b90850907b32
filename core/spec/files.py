"""A spec in and out: reading a TOML file, writing TOML text, and the plain-data form that
JSON documents and checkpoints hold. Every way in structures strictly and validates."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import tomli_w

from trm.errors import TrmError
from trm.spec.checks import validate
from trm.spec.schema import RunSpec
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
    spec = structure_strict(raw, RunSpec, str(path))
    validate(spec, str(path))
    return spec


def spec_to_toml(spec: RunSpec) -> str:
    """The spec as TOML text that :func:`load_spec` reads back to an equal spec."""
    return tomli_w.dumps(CONVERTER.unstructure(spec))


def spec_to_dict(spec: RunSpec) -> dict[str, Any]:
    """Plain-data form of a spec (for JSON and checkpoints)."""
    return CONVERTER.unstructure(spec)


def spec_from_dict(data: dict[str, Any], where: str) -> RunSpec:
    """Inverse of :func:`spec_to_dict`, with the same strict checks as loading a file."""
    spec = structure_strict(data, RunSpec, where)
    validate(spec, where)
    return spec
