"""trm: train Tiny Recursive Models on the hardware you have.

Plugin authors need only ``from trm import hookimpl``; hook contracts live in
:mod:`trm.hookspecs`. Scripts and notebooks call :func:`trm.train`, ``trm.load`` and
``trm.estimate`` (docs/python-api.md). Those import torch, so the API module loads on first
use and ``import trm`` stays light for plugin authors. No module of the package imports this
root: each imports what it needs from where it lives (the marker from :mod:`trm.hookspecs`,
the version from :mod:`trm.version`), so the root's lazy imports close no cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trm.errors import TrainingFailed, TrmError
from trm.hookspecs import hookimpl
from trm.version import __version__

if TYPE_CHECKING:
    from trm.api import Estimate, Model, Run, RunSummary, Solution, estimate
    from trm.formats import Solver
    from trm.spec import RunSpec

# the public API's names (trm.api), imported when one of them is first used
_API_NAMES = ("Estimate", "Model", "Run", "RunSummary", "Solution", "estimate")

__all__ = [
    "Estimate",
    "Model",
    "Run",
    "RunSummary",
    "Solution",
    "TrainingFailed",
    "TrmError",
    "__version__",
    "estimate",
    "hookimpl",
    "load",
    "sweep",
    "train",
]


def train(
    spec: str | Path | RunSpec,
    *,
    out: Path | str | None = None,
    plugins: Any = (),
    disable: Any = (),
    overrides: Any = None,
    max_steps: int | None = None,
    resume: str | Path = "auto",
    mode: str = "balanced",
) -> Run:
    """Train ``spec`` as ``trm run`` does and return its :class:`~trm.api.run.Run`, e.g.
    ``trm.train("quickstart", overrides={"train.lr": 3e-4}, plugins=[MyLogger()])``.

    The parameters and what each raises are those of :func:`trm.api.training.train`
    (docs/python-api.md); this function defers its import, which loads torch.
    """
    from trm.api.training import train as train_spec

    return train_spec(
        spec,
        out=out,
        plugins=plugins,
        disable=disable,
        overrides=overrides,
        max_steps=max_steps,
        resume=resume,
        mode=mode,
    )


def load(name_or_path: str | Path, *, plugins: Any = ()) -> Model | Solver:
    """The model ``name_or_path`` names, ready to ``.solve(puzzle)``: for a run directory, a
    checkpoint file, a model folder or a shipped model's name, the torch
    :class:`~trm.api.model.Model` (:func:`trm.api.model.load`, which imports torch); for a
    model a format runs without torch (an ONNX solver folder of ``trm export --format
    onnx``), that format's :class:`~trm.formats.Solver`, and torch is never imported.
    ``plugins`` and what this raises: as :func:`trm.api.model.load`'s."""
    from trm.formats import find_solver

    solver = find_solver(name_or_path, plugins) if _is_path_like(name_or_path) else None
    if solver is not None:
        return solver
    from trm.api import load as load_model

    return load_model(name_or_path, plugins=plugins)


def _is_path_like(value: Any) -> bool:
    return isinstance(value, (str, Path)) and bool(str(value).strip())


def sweep(
    study: str | Path,
    *,
    out: str | Path | None = None,
    workers: int = 1,
    storage: str | None = None,
) -> Any:
    """Run a study file as ``trm sweep`` does (many runs of one spec on Optuna, with
    pruning and resume) and return the study as it stands (docs/sweeps.md).

    The parameters and what each raises are those of the ``studies`` plugin's ``sweep``
    (``trm.plugins.studies.sweep.sweep``), which returns its ``StudyResult``; this function
    finds it through the ``api_functions`` hook when called, which loads torch and Optuna.
    """
    from trm.plugin_manager import load_plugins

    sweep_study = load_plugins().api_function("sweep")

    return sweep_study(study, out=out, workers=workers, storage=storage)


def __getattr__(name: str) -> Any:
    """The Python API's names other than :func:`train`, imported on first use."""
    if name in _API_NAMES:
        from trm import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API_NAMES})
