"""The specs shipped with trm (the ``trm.specs`` package): their names, and a name or a path
turned into a spec file."""

from __future__ import annotations

from pathlib import Path

from trm.errors import TrmError


def shipped_spec_names() -> list[str]:
    """Names of the specs shipped with trm (``trm run quickstart``)."""
    from importlib import resources

    return sorted(
        p.name.removesuffix(".toml")
        for p in resources.files("trm.specs").iterdir()
        if p.name.endswith(".toml")
    )


def resolve_spec_path(name_or_path: str) -> Path:
    """A file path as given, or the path of a shipped spec of that name."""
    from importlib import resources

    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    candidate = resources.files("trm.specs") / f"{name_or_path}.toml"
    if candidate.is_file():
        return Path(str(candidate))
    raise TrmError(
        f"no spec file or shipped spec named {name_or_path!r}; "
        f"shipped specs: {', '.join(shipped_spec_names())}"
    )
