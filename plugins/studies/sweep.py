"""``trm.sweep``: run a study file as ``trm sweep`` does, from a script or a notebook."""

from __future__ import annotations

from pathlib import Path

from trm.api.arguments import path_argument, python_errors
from trm.api.log import Log, say
from trm.errors import TrmError
from trm.paths import default_run_dir
from trm.plugins.studies.results import StudyResult
from trm.plugins.studies.runner import run_study
from trm.plugins.studies.study_file import check_plugin_keys, read_study_file

# the most worker processes one machine runs (each needs a core)
MAX_WORKERS = 256


def sweep(
    study: str | Path,
    *,
    out: str | Path | None = None,
    workers: int = 1,
    storage: str | None = None,
) -> StudyResult:
    """Run the study file ``study`` (docs/sweeps.md) into ``out`` (default
    ``runs/<study name>``) with ``workers`` processes sharing this machine, and return the
    study as it stands (:class:`~trm.plugins.studies.results.StudyResult`).

    The same ``out`` continues a study: finished trials are not run again and a trial cut
    off mid-run resumes from its checkpoint. ``storage`` is an Optuna database URL shared by
    workers on several machines (default SQLite in ``out/study.db``). TrmError for bad
    input, before any trial starts."""
    with python_errors():
        if not isinstance(study, (str, Path)) or not str(study).strip():
            raise TrmError(f"study must be the path of a study file, not {study!r}")
        out_dir = path_argument(out, "out")
        return sweep_study(Path(study), out_dir, _workers(workers), _storage(storage), say)


def sweep_study(
    path: Path,
    out: Path | None,
    workers: int,
    storage: str | None,
    log: Log,
    worker_of: int | None = None,
    plugins: tuple[str, ...] = (),
) -> StudyResult:
    """The work of ``trm sweep`` and :func:`sweep`: read and check the study file, then run
    its trials into ``out`` (default ``runs/<study name>``), each with the ``--plugins``
    values ``plugins``."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise TrmError(
            "trm sweep runs studies on Optuna, which is not installed: pip install 'trm[sweep]'"
        ) from None
    study_file = read_study_file(path)
    check_plugin_keys(study_file, plugins)
    out_dir = default_run_dir(study_file.name, out)
    return run_study(study_file, out_dir, workers, storage, log, worker_of, plugins)


def _workers(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
        raise TrmError(f"workers must be a whole number from 1 to {MAX_WORKERS}, not {value!r}")
    return value


def _storage(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "://" not in value:
        raise TrmError(
            f"storage must be a database URL such as sqlite:///study.db or "
            f"postgresql://user@host/db, not {value!r}"
        )
    return value
