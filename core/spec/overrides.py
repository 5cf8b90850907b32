"""``--set section.key=value``: a spec changed key by key, with the file's checks."""

from __future__ import annotations

import sys
from typing import Any

from trm.errors import TrmError
from trm.spec.checks import validate
from trm.spec.files import spec_to_dict
from trm.spec.schema import RunSpec
from trm.spec.strict import structure_strict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``--set section.key=value``; the value is read as a TOML value or a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise TrmError(f"--set {text!r}: expected KEY=VALUE, e.g. --set train.lr=3e-4")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def apply_overrides(spec: RunSpec, overrides: list[str]) -> RunSpec:
    """Apply ``--set`` overrides with the same type checks as the file; returns a new spec."""
    if not overrides:
        return spec
    data = spec_to_dict(spec)
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node: Any = data
        if parts[0] == "plugins" and len(parts) >= 3 and isinstance(data.get("plugins"), dict):
            data["plugins"].setdefault(parts[1], {})  # --set plugins.NAME.KEY makes the table
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
                where = ".".join(parts[: depth + 1])
                raise TrmError(
                    f"--set {key}: there is no section [{where}]; "
                    f"sections are {', '.join(s for s in data if isinstance(data[s], dict))}"
                )
            node = node[part]
        leaf = parts[-1]
        if len(parts) == 1 and leaf != "name":
            raise TrmError(f"--set {key}: name a section and key, e.g. train.lr")
        is_open_table = parts[:2] == ["data", "generate"] or parts[0] == "plugins"
        if leaf not in node and not is_open_table:
            known = ", ".join(sorted(node))
            raise TrmError(f"--set {key}: unknown key {leaf!r}; known keys here: {known}")
        node[leaf] = value
    spec = structure_strict(data, RunSpec, "--set")
    validate(spec, "--set")
    return spec
