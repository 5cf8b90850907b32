"""trm: train Tiny Recursive Models on the hardware you have.

Plugin authors need only ``from trm import hookimpl``; hook contracts live in
:mod:`trm.hookspecs`. Scripts and notebooks call ``trm.train``, ``trm.load`` and
``trm.estimate`` (docs/python-api.md); those names import torch, so they load on first use
and ``import trm`` stays light for plugin authors.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("trm")

from trm.errors import TrainingFailed, TrmError  # noqa: E402

if TYPE_CHECKING:
    from trm.api import Estimate, Model, Run, Solution, estimate, load, train

# the public API (trm.api), imported when one of these names is first used; ``train`` is
# also the name of the loop's package, which is made callable instead (TrainPackage)
_API_NAMES = ("Estimate", "Model", "Run", "Solution", "estimate", "load")

__all__ = [
    "Estimate",
    "Model",
    "Run",
    "Solution",
    "TrainingFailed",
    "TrmError",
    "__version__",
    "estimate",
    "hookimpl",
    "load",
    "train",
]


class TrainPackage(types.ModuleType):
    """The class of the package ``trm.train`` (the training loop), which makes it callable:
    ``trm.train(spec, ...)`` is :func:`trm.api.training.train`.

    The issue names the function ``trm.train`` while ``trm.train`` is the loop's package;
    a function in its place would hide the package from ``import trm.train.loop`` users and
    from tools that walk attributes (mock, monkeypatch). So the package stays a package and
    calling it calls the API (imported on the first call, from the top of the layers).
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from trm.api.training import train as run_spec

        return run_spec(*args, **kwargs)

    @property
    def __signature__(self) -> Any:
        import inspect

        from trm.api.training import train as run_spec

        return inspect.signature(run_spec)


def __getattr__(name: str) -> Any:
    """``trm.train`` (the loop's package, callable) and the other API names: imported on
    first use."""
    if name == "train":
        import trm.train

        return trm.train
    if name in _API_NAMES:
        from trm import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API_NAMES})
