"""The ``evaluation`` plugin: the commands ``trm eval`` and ``trm solve``, added through
``register_commands``. Importing this module is cheap (``trm --help`` does): torch loads when
one of the commands runs."""

from __future__ import annotations

import argparse

from trm.hookspecs import hookimpl

ACTIVATION = "default"


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    from trm.plugins.evaluation import eval_cmd

    eval_cmd.register(commands, common)
