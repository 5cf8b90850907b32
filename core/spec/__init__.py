"""Run specs: the TOML file that says what to train and how.

A spec has four sections, each an attrs class: ``[arch]`` (the network, with the reference
implementation's names), ``[train]`` (optimisation), ``[data]`` (which task and where its
files are) and ``[runtime]`` (device, precision, threads); and optionally ``[plugins.NAME]``
tables, each a plugin's own settings, which that plugin structures and checks itself (the
``check_spec`` hook; :func:`structure_strict` with ``root="plugins.NAME"``). Specs are
frozen; every change — ``--set``, an ``adapt_config`` plugin — makes a new one with
:func:`attrs.evolve`.

cattrs is used only at the boundary (TOML in, TOML out). Structuring is strict: an unknown key,
a value of the wrong type, or an impossible value raises :class:`~trm.errors.TrmError` naming
the key path (``train.lr``) and what to do.

This package is the place to import every name from (``from trm.spec import RunSpec``); its
modules each do one thing:

- :mod:`trm.spec.schema`: the sections, :class:`RunSpec` and :class:`Change`;
- :mod:`trm.spec.strict`: the strict converter and its refusals in the user's words;
- :mod:`trm.spec.checks`: ranges, choices and agreements (:func:`validate`);
- :mod:`trm.spec.files`: TOML files and text, and the plain-data form;
- :mod:`trm.spec.overrides`: ``--set section.key=value``;
- :mod:`trm.spec.shipped_specs`: the specs shipped with trm, by name.
"""

from __future__ import annotations

from trm.spec.checks import MAX_SEED, MAX_THREADS, validate
from trm.spec.files import load_spec, spec_from_dict, spec_to_dict, spec_to_toml
from trm.spec.overrides import apply_overrides, parse_override
from trm.spec.schema import (
    ACTIVATION_CHECKPOINTING_CHOICES,
    COMPILE_CHOICES,
    CUDA_GRAPHS_CHOICES,
    DEVICE_NAME,
    HOST_MEMORY_CHOICES,
    LOSSES,
    MIX_SOURCE,
    POS_ENCODINGS,
    PRECISIONS,
    READERS,
    ArchSpec,
    Change,
    DataSpec,
    MixEntry,
    RunSpec,
    RuntimeSpec,
    TrainSpec,
)
from trm.spec.shipped_specs import resolve_spec_path, shipped_spec_names
from trm.spec.strict import CONVERTER, structure_strict, structure_value

__all__ = [
    "ACTIVATION_CHECKPOINTING_CHOICES",
    "COMPILE_CHOICES",
    "CONVERTER",
    "CUDA_GRAPHS_CHOICES",
    "DEVICE_NAME",
    "HOST_MEMORY_CHOICES",
    "LOSSES",
    "MAX_SEED",
    "MAX_THREADS",
    "MIX_SOURCE",
    "POS_ENCODINGS",
    "PRECISIONS",
    "READERS",
    "ArchSpec",
    "Change",
    "DataSpec",
    "MixEntry",
    "RunSpec",
    "RuntimeSpec",
    "TrainSpec",
    "apply_overrides",
    "load_spec",
    "parse_override",
    "resolve_spec_path",
    "shipped_spec_names",
    "spec_from_dict",
    "spec_to_dict",
    "spec_to_toml",
    "structure_strict",
    "structure_value",
    "validate",
]
