"""The ``demo`` plugin's hooks: the ``trm demo`` command. Importing this module is cheap
(``trm --help`` does): the model and the server load when the command runs."""

from __future__ import annotations

import argparse

from trm.hookspecs import hookimpl

ACTIVATION = "default"


@hookimpl
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser
) -> None:
    from trm.plugins.demo import demo_cmd

    demo_cmd.register(commands, common)
