"""The ``studies`` plugin: ``trm sweep`` (a study of many runs of one spec, on Optuna) and
the Python API's :func:`trm.sweep`. Importing this module is cheap (``trm --help`` does):
the studies, torch and Optuna load when a study runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from trm.hookspecs import hookimpl

ACTIVATION = "default"


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    from trm.plugins.studies import sweep_cmd

    sweep_cmd.register(commands, common)


def _sweep(*args: Any, **kwargs: Any) -> Any:
    from trm.plugins.studies.sweep import sweep  # torch loads here, Optuna when it runs

    return sweep(*args, **kwargs)


def _study_report(*args: Any, **kwargs: Any) -> Any:
    from trm.plugins.studies.report import make_study_report  # Optuna and matplotlib load here

    return make_study_report(*args, **kwargs)


@hookimpl
def api_functions() -> dict[str, Callable[..., Any]]:
    """``trm.sweep``, and the study's page ``trm report STUDY_DIR`` draws."""
    return {"sweep": _sweep, "study_report": _study_report}
