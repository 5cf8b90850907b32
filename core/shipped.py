"""Models shipped with trm: their files, their manifests, and the check that the two agree.

A shipped model NAME is two files in the package folder ``trm.weights`` (``weights/`` in the
repository): ``NAME.pt``, a checkpoint reduced to what inference needs (see
``trm.restore.reduce_checkpoint``; it loads with ``torch.load(weights_only=True)``),
and ``NAME.json``, its :class:`Manifest` — how it was trained (exact command, seed, commit,
machine, steps, wall time), what it scored on the held-out puzzles of each kind it was
measured on, and the SHA-256 and size of ``NAME.pt``. ``benchmarks/shipped_weights.py``
writes both.

``TRM_SHIPPED_DIR`` names another folder to read shipped models from (the regeneration
script's ``--out``, a test's tampered copy). ``trm solve NAME``, ``trm eval NAME`` and
``trm.load(NAME)`` come here through :func:`shipped_checkpoint`, which refuses a file whose
SHA-256 is not the manifest's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attrs import define, field

from trm.checkpoint_file import file_sha256
from trm.errors import TrmError
from trm.spec import CONVERTER, MAX_SEED, structure_strict

# The environment variable naming a folder of shipped models used instead of the package's.
SHIPPED_DIR_ENV = "TRM_SHIPPED_DIR"
CHECKPOINT_SUFFIX = ".pt"
MANIFEST_SUFFIX = ".json"


@define(frozen=True)
class Machine:
    """Where a shipped model was trained: the CPU as ``lscpu`` names it, its cores, and the
    device the run trained on (``cpu``, ``cuda:0`` …)."""

    cpu_model: str
    physical_cores: int | None
    logical_cores: int | None
    device: str


@define(frozen=True)
class RetriedAccuracy:
    """A model's exact accuracy on one kind with ``attempts`` attempts, the symmetries drawn
    from ``attempts_seed`` (``trm eval --attempts K --attempts-seed N``;
    :mod:`trm.evaluation.attempts`), beside ``exact_accuracy_one_attempt`` measured by the same
    ``command``; ``results`` names the results document (benchmarks/results/…) it is from."""

    attempts: int
    attempts_seed: int
    exact_accuracy: float
    exact_accuracy_one_attempt: float
    command: str
    results: str


@define(frozen=True)
class KindAccuracy:
    """A model's score on the held-out puzzles of one kind.

    ``kind`` names the kind (``"30 clues"``, ``"minimal"``); ``source`` is the data source that
    generates them; ``options`` its full generate options (``[data.generate]``), ``seed`` the
    build seed: the source's ``build(options, dir, seed)`` writes the same test split again.
    ``count`` is how many of that split's examples were scored (its first ``count``).
    Accuracies are fractions in [0, 1], with one attempt; ``retried`` holds the exact
    accuracies measured with more attempts.
    """

    kind: str
    source: str
    options: dict[str, Any]
    seed: int
    count: int
    exact_accuracy: float
    cell_accuracy: float
    retried: list[RetriedAccuracy] = field(factory=list)


@define(frozen=True)
class Manifest:
    """What ``NAME.json`` records about the shipped model ``NAME``.

    ``command`` is the exact command that trained it, ``seed`` its training seed, ``commit``
    the trm commit it was trained at, ``steps`` the optimizer steps the run made and
    ``checkpoint_step`` the step of the shipped weights (the run's best evaluation), ``wall_s``
    the run's training wall time in seconds. ``sha256`` and ``size_bytes`` describe
    ``NAME.pt``. ``trained_on`` says in words what the training data was.
    """

    name: str
    description: str
    trained_on: str
    puzzle: str
    command: str
    seed: int
    commit: str
    trm_version: str
    machine: Machine
    steps: int
    checkpoint_step: int
    wall_s: float
    kinds: list[KindAccuracy] = field(factory=list)
    sha256: str = ""
    size_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """The manifest as the JSON document ``NAME.json`` holds."""
        return CONVERTER.unstructure(self)


def shipped_dir() -> Path:
    """The folder shipped models are read from: ``TRM_SHIPPED_DIR`` when set, else the
    package folder ``trm.weights``."""
    override = os.environ.get(SHIPPED_DIR_ENV)
    if override:
        return Path(override).expanduser()
    import trm.weights

    return Path(trm.weights.__file__).parent


def shipped_names() -> list[str]:
    """The names of the shipped models (those with both ``NAME.pt`` and ``NAME.json``),
    sorted."""
    folder = shipped_dir()
    try:
        files = {p.name for p in folder.iterdir() if p.is_file()}
    except OSError:
        return []
    return sorted(
        name.removesuffix(CHECKPOINT_SUFFIX)
        for name in files
        if name.endswith(CHECKPOINT_SUFFIX)
        and name.removesuffix(CHECKPOINT_SUFFIX) + MANIFEST_SUFFIX in files
    )


def _known(name: str) -> None:
    names = shipped_names()
    if name not in names:
        listed = ", ".join(names) or f"none (no NAME.pt with NAME.json in {shipped_dir()})"
        raise TrmError(f"unknown model {name}; shipped models: {listed}")


def read_manifest(path: Path) -> Manifest:
    """The manifest in ``path``; TrmError naming the file when it is unreadable or not
    exactly a manifest (an unknown or missing key is an error)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrmError(f"manifest {path} cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise TrmError(f"manifest {path} is not valid JSON ({exc}); it is damaged") from None
    if not isinstance(data, dict):
        raise TrmError(f"manifest {path} holds {type(data).__name__}, not a JSON object")
    manifest = structure_strict(data, Manifest, f"manifest {path}")
    for index, kind in enumerate(manifest.kinds):
        _check_range(path, f"kinds[{index}].seed", kind.seed, 0, MAX_SEED)
        _check_range(path, f"kinds[{index}].count", kind.count, 1, None)
        _check_range(path, f"kinds[{index}].exact_accuracy", kind.exact_accuracy, 0.0, 1.0)
        _check_range(path, f"kinds[{index}].cell_accuracy", kind.cell_accuracy, 0.0, 1.0)
        for number, retried in enumerate(kind.retried):
            where = f"kinds[{index}].retried[{number}]"
            _check_range(path, f"{where}.attempts", retried.attempts, 2, None)
            _check_range(path, f"{where}.exact_accuracy", retried.exact_accuracy, 0.0, 1.0)
            one = retried.exact_accuracy_one_attempt
            _check_range(path, f"{where}.exact_accuracy_one_attempt", one, 0.0, 1.0)
    return manifest


def _check_range(path: Path, key: str, value: float, low: float, high: float | None) -> None:
    """TrmError naming the manifest and key unless ``low <= value <= high`` (no upper bound
    for None; nan is outside)."""
    if low <= value and (high is None or value <= high):
        return
    bounds = f"[{low}, {high}]" if high is not None else f"at least {low}"
    raise TrmError(
        f"manifest {path}: {key}: {value} is outside {bounds}; it is damaged (reinstall trm "
        "or regenerate it with benchmarks/shipped_weights.py)"
    )


def check_kind_sources(manifest: Manifest, source: str) -> None:
    """TrmError unless every kind of ``manifest`` is of ``source``, the data source of the
    model it describes (its puzzles are regenerated with that source)."""
    for index, kind in enumerate(manifest.kinds):
        if kind.source != source:
            path = shipped_dir() / f"{manifest.name}{MANIFEST_SUFFIX}"
            raise TrmError(
                f"manifest {path}: kinds[{index}].source: {kind.source!r} is not the data "
                f"source the model was trained on ({source!r}); it is damaged (reinstall trm "
                "or regenerate it with benchmarks/shipped_weights.py)"
            )


def check_file(path: Path, manifest: Manifest, where: str) -> None:
    """TrmError unless ``path`` has the SHA-256 and size ``manifest`` records."""
    try:
        actual = file_sha256(path)
    except OSError as exc:
        raise TrmError(f"{where}: {path} cannot be read ({exc.strerror or exc})") from None
    if actual != manifest.sha256:
        raise TrmError(
            f"{where}: {path} does not match the SHA-256 its manifest records "
            f"({actual[:12]}… instead of {manifest.sha256[:12]}…): it is damaged or was "
            "replaced; reinstall trm or regenerate it with benchmarks/shipped_weights.py"
        )


def shipped_manifest(name: str) -> Manifest:
    """The manifest of the shipped model ``name``, checked against its ``NAME.pt``.

    TrmError for an unknown name (listing the shipped ones), a manifest that does not parse,
    or a file whose SHA-256 is not the manifest's.
    """
    _known(name)
    folder = shipped_dir()
    manifest = read_manifest(folder / f"{name}{MANIFEST_SUFFIX}")
    if manifest.name != name:
        raise TrmError(
            f"manifest {folder / (name + MANIFEST_SUFFIX)} describes model {manifest.name!r}, "
            f"not {name!r}; the shipped files were renamed — reinstall trm or regenerate them"
        )
    check_file(folder / f"{name}{CHECKPOINT_SUFFIX}", manifest, f"shipped model {name}")
    return manifest


def shipped_checkpoint(name: str) -> Path:
    """The path of the shipped model ``name``'s ``NAME.pt``, after checking its SHA-256
    against the manifest (same errors as :func:`shipped_manifest`). Load it as any
    checkpoint file (the ``load_checkpoint`` hook; ``weights_only=True``)."""
    shipped_manifest(name)
    return shipped_dir() / f"{name}{CHECKPOINT_SUFFIX}"


def looks_like_a_name(text: str) -> bool:
    """True when ``text`` can only be meant as a shipped model's name: one word with no
    folder separator and no file extension (``sudoku9-laptop``, not ``runs/x`` or ``a.pt``)."""
    word = text.strip()
    return (
        bool(word)
        and word == text
        and "/" not in word
        and os.sep not in word
        and not word.startswith(("~", "."))
        and Path(word).suffix == ""
    )
