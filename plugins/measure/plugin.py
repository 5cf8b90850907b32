"""The ``measure`` plugin: the commands ``trm bench`` and ``trm analyze``, added through
``register_commands``."""

from __future__ import annotations

import argparse

from trm.hookspecs import hookimpl

ACTIVATION = "default"


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    from trm.plugins.measure import analyze_cmd, bench_cmd

    bench_cmd.register(commands, common)
    analyze_cmd.register(commands, common)
