"""``trm.spec`` is the one import path for run specs, and each of its modules does one job:
the schema, the strict converter, the checks, files, ``--set`` overrides, shipped specs."""

from __future__ import annotations

import importlib

import pytest

import trm.spec

HOMES = {
    "trm.spec.schema": ["ArchSpec", "TrainSpec", "DataSpec", "RuntimeSpec", "RunSpec", "Change"],
    "trm.spec.strict": ["CONVERTER", "structure_strict"],
    "trm.spec.checks": ["validate", "MAX_SEED", "MAX_THREADS"],
    "trm.spec.files": ["load_spec", "spec_to_toml", "spec_to_dict", "spec_from_dict"],
    "trm.spec.overrides": ["parse_override", "apply_overrides"],
    "trm.spec.shipped_specs": ["shipped_spec_names", "resolve_spec_path"],
}


@pytest.mark.parametrize("module", sorted(HOMES))
def test_each_spec_name_is_importable_from_trm_spec_and_defined_in_its_module(module):
    home = importlib.import_module(module)
    for name in HOMES[module]:
        assert getattr(trm.spec, name) is getattr(home, name), name
        assert name in trm.spec.__all__


def test_trm_spec_exports_only_what_its_modules_define():
    homes = [importlib.import_module(module) for module in HOMES]
    for name in trm.spec.__all__:
        assert any(getattr(home, name, None) is getattr(trm.spec, name) for home in homes), name
