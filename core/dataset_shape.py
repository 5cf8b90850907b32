"""The shape of a spec's train data (seq_len, vocab, puzzle identifiers, size) before training.

Memory and time estimates need it before the data exist. In order of preference:

1. ``data.dir`` names a built dataset: its ``train/dataset.json`` and file sizes;
2. the run directory already holds the data built from this recipe;
3. the data source promises a shape: an optional method
   ``dataset_shape(options, seed) -> DatasetShape`` on the DataSource;
4. a shape cached in the user cache directory for this recipe (same source, options, seed);
5. otherwise the source builds the data once — into the run directory when a run is about
   to use it, else into a temporary directory — and the shape is cached for next time (the
   only slow path; it says so).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from trm.errors import TrmError
from trm.memory import DatasetShape
from trm.spec import CONVERTER, RunSpec


def read_shape(data_dir: Path, split: str = "train") -> DatasetShape:
    """The shape of ``data_dir/split`` from its dataset.json and array files."""
    split_dir = data_dir / split
    try:
        meta = json.loads((split_dir / "dataset.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TrmError(
            f"cannot read {split_dir / 'dataset.json'} ({exc}); is {data_dir} a built dataset?"
        ) from exc
    file_bytes = sum(
        f.stat().st_size
        for f in split_dir.glob("*__*.npy")
        if f.name.endswith(("__inputs.npy", "__labels.npy"))
    )
    return DatasetShape(
        seq_len=int(meta["seq_len"]),
        vocab_size=int(meta["vocab_size"]),
        num_puzzle_identifiers=int(meta["num_puzzle_identifiers"]),
        total_puzzles=int(meta.get("total_puzzles", 0)),
        total_groups=int(meta.get("total_groups", 0)),
        train_file_bytes=file_bytes,
    )


def _cache_path(recipe: dict[str, Any]) -> Path:
    from trm.machine_benchmark import cache_dir
    from trm.prepare import recipe_digest

    return cache_dir() / "dataset-shapes" / f"{recipe_digest(recipe)}.json"


def resolve_shape(
    spec: RunSpec,
    source: Any,
    run_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
    build_into_run_dir: Callable[[Path], Path] | None = None,
) -> DatasetShape:
    """The train shape of ``spec``'s data; see the module docstring for the order tried.

    With ``run_dir`` and ``build_into_run_dir`` (``trm run``), step 5 builds the data where
    the run will read it (``build_into_run_dir(run_dir)`` returns the data directory), so
    it is built once, not twice.
    """
    if spec.data.dir:
        path = Path(spec.data.dir).expanduser()
        if not path.is_dir():
            raise TrmError(
                f"data.dir: data directory {path} does not exist; build one with "
                f"`trm data build {spec.data.source} --out {path}` or fix data.dir"
            )
        return read_shape(path, spec.data.train_split)
    from trm.prepare import build_options

    options = build_options(source, spec.data.generate, "data.generate")
    recipe = {
        "source": source.name,
        "options": CONVERTER.unstructure(options),
        "seed": spec.train.seed,
    }
    built = (run_dir or Path("runs") / spec.name) / "data"
    try:
        if json.loads((built / "build.json").read_text()) == recipe:
            return read_shape(built, spec.data.train_split)
    except (OSError, json.JSONDecodeError, TrmError):
        pass
    promise = getattr(source, "dataset_shape", None)
    if callable(promise):
        return promise(options, spec.train.seed)
    cached = _cache_path(recipe)
    try:
        return DatasetShape(**json.loads(cached.read_text()))
    except (OSError, json.JSONDecodeError, TypeError):
        pass
    if run_dir is not None and build_into_run_dir is not None:
        try:
            return read_shape(build_into_run_dir(run_dir), spec.data.train_split)
        except OSError:
            pass  # not writable: the run will say so; measure in a temporary directory
    if log is not None:
        log(f"measuring the shape of the {source.name} data by building it once (cached after)")
    with tempfile.TemporaryDirectory(prefix="trm-shape-") as tmp:
        source.build(options, Path(tmp), spec.train.seed, log or (lambda _m: None))
        shape = read_shape(Path(tmp), spec.data.train_split)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(attrs.asdict(shape)))
    except OSError:
        pass
    return shape
