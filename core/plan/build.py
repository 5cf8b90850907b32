"""Building a dataset into a folder without ever losing the one already there.

Nothing is touched until the output folder is checked (:func:`check_output_folder`); the
build goes to a temporary sibling folder and is swapped in only when complete
(:func:`build_into`), so a failure or Ctrl-C leaves the folder exactly as it was. An existing
folder is replaced only with ``force`` and only when it holds a trm dataset. ``trm data
build`` and the data a run builds into ``RUN_DIR/data`` both go through here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trm.data.source import DataSource
from trm.errors import TrmError

BUILD_RECORD = "build.json"
Log = Callable[[str], None]


def is_dataset_dir(path: Path) -> bool:
    """Whether ``path`` holds a trm dataset: a split's ``dataset.json`` or a build record."""
    return (
        (path / "train" / "dataset.json").is_file()
        or (path / "test" / "dataset.json").is_file()
        or (path / BUILD_RECORD).is_file()
    )


def _check_replaceable(out: Path, shown: str, force: bool) -> None:
    """TrmError unless ``out`` is absent, an empty folder, or a dataset with ``--force``."""
    try:
        if not out.exists():
            return
        if not out.is_dir():
            raise TrmError(f"--out {shown} is a file, not a folder; choose another --out")
        if not any(out.iterdir()):
            return
    except OSError as error:
        raise TrmError(
            f"cannot read --out {shown}: {error.strerror or error}; choose another --out"
        ) from None
    if not force:
        raise TrmError(
            f"{shown} exists and is not empty; use --force to replace the dataset there, "
            "or choose another --out"
        )
    if not is_dataset_dir(out):
        raise TrmError(
            f"--force: {shown} is not a trm dataset (no train/dataset.json, test/dataset.json "
            f"or {BUILD_RECORD}), so it is left alone; choose another --out, or remove it yourself"
        )


def check_output_folder(given: str | None, force: bool) -> Path:
    """The absolute ``--out`` folder (symlinks followed), checked before anything is written."""
    if given is None:
        raise TrmError("trm data build: --out DIR is required; give the folder to write to")
    if not given.strip():
        raise TrmError("trm data build: --out is empty; give the folder to write to")
    try:
        out = Path(given).expanduser().resolve()
    except (OSError, RuntimeError) as error:
        raise TrmError(f"--out {given}: {error}; choose another --out") from None
    if out.parent == out:
        raise TrmError(f"--out {given} is the file-system root; choose a folder below it")
    _check_replaceable(out, given, force)
    ancestor = out.parent
    while not ancestor.exists() and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise TrmError(f"--out {given}: {ancestor} is a file, not a folder; choose another --out")
    return out


def _make_staging(out: Path, shown: str) -> Path:
    """A new empty temporary folder beside ``out`` (creating ``out``'s parents)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.with_name(f".{out.name}.building-{secrets.token_hex(4)}")
        staging.mkdir()  # the usual permissions (mkdtemp's would be 0700)
        return staging
    except OSError as error:
        raise TrmError(
            f"cannot create a folder beside --out {shown}: {error.strerror or error}; "
            "choose another --out"
        ) from None


def _swap_in(staging: Path, out: Path, shown: str, force: bool, log: Log) -> None:
    """Move the built ``staging`` to ``out``; an old dataset there is set aside, then deleted.

    On any failure (Ctrl-C included) ``out`` is as it was and ``staging`` is removed.
    """
    aside: Path | None = None
    try:
        _check_replaceable(out, shown, force)  # again: something may have appeared meanwhile
        if out.exists():
            aside = out.with_name(f".{out.name}.old-{secrets.token_hex(4)}")
            os.rename(out, aside)
        os.rename(staging, out)
    except BaseException as error:
        if aside is not None and aside.exists() and not out.exists():
            try:
                os.rename(aside, out)
            except OSError:
                log(f"the old dataset is at {aside}; move it back to {shown}")
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise TrmError(
                f"cannot move the new dataset to --out {shown}: {error.strerror or error}; "
                "it is unchanged"
            ) from None
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
        if aside.exists():
            log(f"could not delete the old dataset set aside at {aside}; remove it yourself")


def build_into(
    source: DataSource,
    options: Any,
    seed: int,
    out: Path,
    shown: str,
    force: bool,
    log: Log,
    record: dict[str, Any] | None = None,
) -> None:
    """Build ``source``'s dataset for ``options`` and ``seed`` into ``out`` (checked with
    :func:`check_output_folder`), writing ``record`` as build.json when given."""
    staging = _make_staging(out, shown)
    try:
        source.build(options, staging, seed, log)
        if record is not None:
            (staging / BUILD_RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _swap_in(staging, out, shown, force, log)
