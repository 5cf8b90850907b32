"""Packaging guards: every package folder ships in the wheel; every entry point imports."""

from __future__ import annotations

import importlib
import sys
from importlib import metadata
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_in_pyproject():
    setuptools = PYPROJECT["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *relative.parts]))
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_every_declared_entry_point_is_installed_and_imports():
    declared = PYPROJECT["project"]["entry-points"]["trm.plugins"]
    installed = {ep.name: ep.value for ep in metadata.entry_points(group="trm.plugins")}
    for name, target in declared.items():
        assert installed.get(name) == target, f"reinstall: pip install -e . ({name})"
        module, _, attribute = target.partition(":")
        loaded = importlib.import_module(module)
        assert not attribute or hasattr(loaded, attribute), target
