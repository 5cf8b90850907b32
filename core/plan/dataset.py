"""A spec's data before the loop: which source, where the files are, built when needed, and
the train split's shape.

``[data] dir`` names a built dataset, or is empty: then the source's generator builds one from
``[data.generate]`` and the seed (the *recipe*) into ``RUN_DIR/data``, reused while
``RUN_DIR/data/build.json`` records the same recipe. A build goes to a temporary sibling and
is swapped in when complete, so an interrupted build leaves the old data (or none), never
half a dataset.

A dataset given by ``data.dir`` must be its source's: one whose build record names another
source, or whose first train rows the source's optional ``dataset_problem`` says are not its
puzzles (a maze dataset under ``source = "sudoku"``), is refused before anything is written.

The shape (:class:`trm.data.shape.DatasetShape`) is needed before the data exist (memory and
time estimates). In order of preference: ``data.dir``'s dataset.json; data already built in
the run directory from this recipe; the source's promise (an optional method
``dataset_shape(options, seed) -> DatasetShape`` on the DataSource); a shape cached in the user
cache directory for this recipe; otherwise the source builds the data once — into the run
directory when a run is about to use it, else into a temporary directory — and the shape is
cached for next time (the only slow path; it says so).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trm.data.puzzle_dataset import open_split
from trm.data.shape import DatasetShape, read_shape
from trm.data.source import DataSource
from trm.errors import TrmError
from trm.paths import cache_dir
from trm.plan.build import BUILD_RECORD, build_into, check_output_folder
from trm.plan.mix import ensure_mix, mix_shape
from trm.plugin_manager import TrmPluginManager
from trm.spec import CONVERTER, RunSpec, structure_strict

Log = Callable[[str], None]
# How many of a given dataset's first train rows its source reads to say whether they are its.
CHECKED_ROWS = 8


def data_sources(pm: TrmPluginManager) -> dict[str, DataSource]:
    """All registered sources by name; a name offered twice is an error."""
    found: dict[str, DataSource] = {}
    for sources in pm.hook.register_data_sources():
        for source in sources or ():
            if source.name in found:
                raise TrmError(
                    f"two plugins provide the data source {source.name!r}; "
                    "switch one off with --plugins no:NAME"
                )
            found[source.name] = source
    return found


def find_data_source(pm: TrmPluginManager, name: str) -> DataSource:
    """The source called ``name``; TrmError lists the known ones."""
    sources = data_sources(pm)
    if name not in sources:
        known = ", ".join(sorted(sources)) or "none (is a data plugin switched off?)"
        raise TrmError(f"data.source: unknown data source {name!r}; known: {known}")
    return sources[name]


def build_options(source: DataSource, table: dict[str, Any], where: str) -> Any:
    """Structure a ``[data.generate]`` table into the source's options class."""
    return structure_strict(table, source.options_type, where, root="data.generate")


def given_data_dir(spec: RunSpec) -> Path | None:
    """``data.dir`` as a checked path, or None when the spec builds its data."""
    if not spec.data.dir:
        return None
    path = Path(spec.data.dir).expanduser()
    if path.is_dir():
        return path.resolve()
    what = "is a file, not a dataset directory" if path.exists() else "does not exist"
    raise TrmError(
        f"data.dir: {path} {what}; build a dataset with "
        f"`trm data build {spec.data.source} --out DIR` and set data.dir to DIR"
    )


def _recorded_source(data_dir: Path) -> str | None:
    """The source named by ``data_dir``'s build record, or None (no record, unreadable)."""
    try:
        record = json.loads((data_dir / BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    source = record.get("source") if isinstance(record, dict) else None
    return source if isinstance(source, str) else None


def dataset_problem(source: DataSource, data_dir: Path, split: str) -> str | None:
    """Why the dataset at ``data_dir`` is not ``source``'s, or None when nothing says so:
    its build record names another source, or the source's optional
    ``dataset_problem(metadata, inputs, labels)`` finds its first :data:`CHECKED_ROWS` rows
    of ``split`` are not its puzzles. TrmError when the split cannot be read."""
    recorded = _recorded_source(data_dir)
    if recorded is not None and recorded != source.name:
        return f"its build record says the {recorded!r} source built it"
    judge = getattr(source, "dataset_problem", None)
    if not callable(judge):
        return None
    opened = open_split(data_dir / split)
    for puzzle_set in opened.sets.values():
        if puzzle_set.num_examples:
            rows = slice(0, CHECKED_ROWS)
            inputs = np.asarray(puzzle_set.inputs[rows], dtype=np.int64)
            labels = np.asarray(puzzle_set.labels[rows], dtype=np.int64)
            return judge(opened.metadata, inputs, labels)
    return None


def checked_data_dir(pm: TrmPluginManager, spec: RunSpec) -> Path | None:
    """:func:`given_data_dir`, with the dataset there checked against ``data.source``:
    TrmError (``data.dir: …``) when it is another source's (:func:`dataset_problem`)."""
    given = given_data_dir(spec)
    if given is None:
        return None
    source = find_data_source(pm, spec.data.source)
    problem = dataset_problem(source, given, spec.data.train_split)
    if problem is not None:
        raise TrmError(
            f"data.dir: {given} does not hold {source.name} puzzles ({problem}); point "
            f"data.dir at a dataset of {source.name} puzzles, or set data.source to the "
            "dataset's source"
        )
    return given


def check_data(pm: TrmPluginManager, spec: RunSpec) -> None:
    """What a single-dataset spec's ``[data]`` names, checked before anything is built: a
    known source; a ``data.dir`` that exists and holds that source's puzzles
    (:func:`checked_data_dir`); else ``[data.generate]`` options the source takes, and
    accepts (its optional ``validate_options``). TrmError naming the key otherwise."""
    if checked_data_dir(pm, spec) is not None:
        return
    source = find_data_source(pm, spec.data.source)
    options = build_options(source, spec.data.generate, "data.generate")
    validate = getattr(source, "validate_options", None)
    if callable(validate):
        validate(options)


def build_recipe(source: DataSource, spec: RunSpec) -> dict[str, Any]:
    """What a built dataset depends on: the source, its options and the seed."""
    options = build_options(source, spec.data.generate, "data.generate")
    return {
        "source": source.name,
        "options": CONVERTER.unstructure(options),
        "seed": spec.train.seed,
    }


def _built_matches(data_dir: Path, recipe: dict[str, Any]) -> bool:
    try:
        return json.loads((data_dir / BUILD_RECORD).read_text(encoding="utf-8")) == recipe
    except (OSError, ValueError):
        return False


def ensure_dataset(pm: TrmPluginManager, spec: RunSpec, run_dir: Path, log: Log) -> Path:
    """The dataset directory the run reads: ``data.dir``, or one built into ``run_dir/data``
    (for ``[[data.mix]]``, the mixed dataset: :func:`trm.plan.mix.ensure_mix`)."""
    if spec.data.is_mix:
        return ensure_mix(pm, spec, run_dir, log, ensure_dataset, check_data)
    given = checked_data_dir(pm, spec)
    if given is not None:
        return given
    source = find_data_source(pm, spec.data.source)
    recipe = build_recipe(source, spec)
    data_dir = run_dir / "data"
    if _built_matches(data_dir, recipe):
        return data_dir.resolve()
    log(f"building {source.name} data into {data_dir} …")
    options = build_options(source, spec.data.generate, "data.generate")
    out = check_output_folder(str(data_dir), force=True)
    build_into(source, options, spec.train.seed, out, str(data_dir), True, log, record=recipe)
    return data_dir.resolve()


def _shape_cache(recipe: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "dataset-shapes" / f"{digest}.json"


def dataset_shape(
    pm: TrmPluginManager, spec: RunSpec, run_dir: Path, log: Log | None = None, build: bool = False
) -> DatasetShape:
    """The train split's shape of ``spec``'s data (see the module docstring for the order).

    ``run_dir`` is where the run reads (or would read) its built data. With ``build``
    (``trm run``, about to train there) the last resort builds into ``run_dir``, so the data
    are built once, not twice.
    """
    if spec.data.is_mix:
        return mix_shape(pm, spec, run_dir, log, build, dataset_shape, check_data)
    split = spec.data.train_split
    given = checked_data_dir(pm, spec)
    if given is not None:
        return read_shape(given, split)
    source = find_data_source(pm, spec.data.source)
    recipe = build_recipe(source, spec)
    if _built_matches(run_dir / "data", recipe):
        return read_shape(run_dir / "data", split)
    options = build_options(source, spec.data.generate, "data.generate")
    promise = getattr(source, "dataset_shape", None)
    if callable(promise):
        return promise(options, spec.train.seed)
    cached = _shape_cache(recipe)
    try:
        return DatasetShape.from_dict(json.loads(cached.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, TrmError):
        pass
    if build:
        try:
            return read_shape(ensure_dataset(pm, spec, run_dir, log or _quiet), split)
        except OSError:
            pass  # not writable: the run will say so; measure in a temporary directory
    if log is not None:
        log(f"measuring the shape of the {source.name} data by building it once (cached after)")
    with tempfile.TemporaryDirectory(prefix="trm-shape-") as tmp:
        source.build(options, Path(tmp), spec.train.seed, log or _quiet)
        shape = read_shape(Path(tmp), split)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(shape.to_dict()), encoding="utf-8")
    except OSError:
        pass
    return shape


def _quiet(_message: str) -> None:
    pass
