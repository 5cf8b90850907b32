"""Where trm keeps things on disk: run directories and the per-user cache."""

from __future__ import annotations

import os
from pathlib import Path

from trm.errors import TrmError

RUNS_ROOT = Path("runs")


def default_run_dir(spec_name: str, out: Path | None = None) -> Path:
    """The run directory: ``out`` when given, else ``runs/<spec name>`` (``~`` expanded)."""
    return (out if out is not None else RUNS_ROOT / spec_name).expanduser()


def out_argument(value: str | Path | None, name: str = "--out") -> Path | None:
    """An output folder given as ``--out``/``out=`` as a Path (None stays None); TrmError for
    empty text, which would otherwise mean the current folder and write beside its files."""
    if isinstance(value, str) and not value.strip():
        raise TrmError(f"{name} is empty; give the folder to write to")
    return None if value is None else Path(value)


def cache_dir() -> Path:
    """The per-user cache directory of trm (``TRM_CACHE_DIR`` overrides it)."""
    override = os.environ.get("TRM_CACHE_DIR")
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("trm", appauthor=False))
