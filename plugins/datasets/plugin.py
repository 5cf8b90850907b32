"""The ``datasets`` plugin: the command ``trm data``, added through ``register_commands``.
Importing this module is cheap (``trm --help`` does)."""

from __future__ import annotations

import argparse

from trm.hookspecs import hookimpl

ACTIVATION = "default"


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    from trm.plugins.datasets import data_cmd

    data_cmd.register(commands, common)
