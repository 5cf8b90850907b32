"""The ``report`` plugin: ``trm report`` (plots, a page and a summary of one or more runs, or
of a study), the Python API's ``Run.report``, and the leak and slowdown checks at the end of
``trm run`` (``run_findings``, the detectors of :mod:`.detect` that the report shows too).
Importing this module is cheap (``trm --help`` does): matplotlib loads when a report is
drawn."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from trm.findings import Finding
from trm.hookspecs import hookimpl

ACTIVATION = "default"


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    from trm.plugins.report import report_cmd

    report_cmd.register(commands, common)


def _report(*args: Any, **kwargs: Any) -> Any:
    from trm.plugins.report.build import make_report  # matplotlib loads here

    return make_report(*args, **kwargs)


@hookimpl
def run_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    from trm.plugins.report.detect import detect

    return detect(rows)


@hookimpl
def api_functions() -> dict[str, Callable[..., Any]]:
    return {"report": _report}
