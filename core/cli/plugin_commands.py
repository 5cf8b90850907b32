"""The commands plugins add to ``trm`` (the ``register_commands`` hook), each shown in
``trm --help`` with the plugin that brings it.

A broken plugin never takes ``trm`` down: one that fails to import, whose hook raises, or
that names a command another already has is reported in one line on stderr
(``trm: warning: …``) and left out; every other command works. ``--plugins no:NAME`` keeps a
plugin from even being imported.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trm.errors import TrmError
from trm.plugin_manager import TrmPluginManager, load_plugins, parse_plugin_list


def warn(message: str) -> None:
    print(f"trm: warning: {message}", file=sys.stderr)


def command_plugins(requested: list[str]) -> TrmPluginManager:
    """The plugin manager the parser is built with: ``--plugins`` as given, or, when that
    names a plugin that cannot be switched on (the command itself then says why), only its
    ``no:NAME`` parts. Plugins that fail to import are left out with a warning."""
    broken: list[str] = []
    try:
        pm = load_plugins(requested, broken=broken)
    except TrmError:
        broken.clear()
        _, unwanted = parse_plugin_list(requested)
        pm = load_plugins([f"no:{name}" for name in unwanted], broken=broken)
    for message in broken:
        warn(message)
    return pm


class _AttributedCommands:
    """The subcommands action as one plugin's ``register_commands`` sees it: ``add_parser``
    refuses a name already taken and marks the help line with the plugin's name."""

    def __init__(self, commands: argparse._SubParsersAction, plugin: str, owners: dict) -> None:
        self._commands = commands
        self._plugin = plugin
        self._owners = owners
        self.added: list[str] = []

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        for word in (name, *kwargs.get("aliases", ())):
            if word in self._owners:
                raise TrmError(f"its command {word!r} is already {self._owners[word]}'s")
        if kwargs.get("help") is not None:
            kwargs["help"] = f"{kwargs['help']} [{self._plugin}]"
        parser = self._commands.add_parser(name, **kwargs)
        for word in (name, *kwargs.get("aliases", ())):
            self._owners[word] = f"plugin {self._plugin!r}"
            self.added.append(word)
        return parser

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._commands, attr)


def _withdraw(commands: argparse._SubParsersAction, names: list[str]) -> None:
    """Take ``names`` out of ``commands`` again (argparse has no public way to)."""
    for name in names:
        commands._name_parser_map.pop(name, None)
    commands._choices_actions[:] = [
        action for action in commands._choices_actions if action.dest not in names
    ]


def add_plugin_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser, requested: list[str]
) -> None:
    """Let every enabled plugin implementing ``register_commands`` add its commands, one
    plugin at a time (in the order of their names), so that a broken one is left out alone."""
    pm = command_plugins(requested)
    owners = {name: "trm's own" for name in commands.choices}
    impls = sorted(pm.hook.register_commands.get_hookimpls(), key=lambda i: i.plugin_name)
    for impl in impls:
        attributed = _AttributedCommands(commands, impl.plugin_name, owners)
        arguments = {"commands": attributed, "common": common, "pm": pm}
        try:
            impl.function(**{name: arguments[name] for name in impl.argnames})
        except Exception as exc:  # a third party's bug must not take trm down
            _withdraw(commands, attributed.added)
            for name in attributed.added:
                owners.pop(name, None)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            warn(
                f"plugin {impl.plugin_name!r} could not add its commands ({first}); they are "
                f"left out (--plugins no:{impl.plugin_name} skips it)"
            )
