"""Load plugins from the ``trm.plugins`` entry-point group and choose which are on.

Every plugin, built-in or third-party, is a module registered under that group. A module says
when it is on through the attribute ``ACTIVATION``:

- ``"default"`` — on unless switched off with ``--plugins no:NAME``;
- ``"auto"`` — on when its module-level ``is_available()`` returns True (a device exists);
- ``"opt-in"`` (also when the attribute is missing) — on only when named in ``--plugins``.

The core never imports a plugin by name; it knows plugins only through this manager.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy
from attrs import frozen

from trm import hookspecs
from trm.errors import TrmError

ENTRY_POINT_GROUP = "trm.plugins"
ACTIVATIONS = ("default", "auto", "opt-in")


@frozen
class PluginInfo:
    """One plugin as ``trm plugins`` shows it."""

    name: str
    distribution: str
    version: str
    activation: str
    enabled: bool
    hooks: tuple[str, ...]
    description: str


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _activation(module: ModuleType) -> str:
    value = getattr(module, "ACTIVATION", "opt-in")
    return value if value in ACTIVATIONS else "opt-in"


def _is_available(module: ModuleType) -> bool:
    check = getattr(module, "is_available", None)
    return bool(check()) if callable(check) else True


def parse_plugin_list(texts: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split ``--plugins a,b,no:c`` values into (names to switch on, names to switch off)."""
    wanted: list[str] = []
    unwanted: list[str] = []
    for text in texts:
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            if item.startswith("no:"):
                unwanted.append(item[3:])
            else:
                wanted.append(item)
    return wanted, unwanted


class TrmPluginManager:
    """A pluggy manager holding the enabled plugins, plus what is known of all of them."""

    def __init__(self, pm: pluggy.PluginManager, infos: list[PluginInfo]) -> None:
        self.pm = pm
        self.infos = infos

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def enabled_names(self) -> list[str]:
        return [info.name for info in self.infos if info.enabled]

    def call_chained(self, hook_name: str, value_key: str, **kwargs: Any) -> list[Any]:
        """Call ``hook_name`` implementation by implementation, in call order.

        Each implementation receives ``kwargs``, with ``kwargs[value_key]`` replaced by the value
        the previous one returned (first element of its tuple). Returns the non-None results.
        """
        caller = getattr(self.pm.hook, hook_name)
        results: list[Any] = []
        for impl in reversed(caller.get_hookimpls()):
            accepted = {k: v for k, v in kwargs.items() if k in impl.argnames}
            result = impl.function(**accepted)
            if result is not None:
                results.append(result)
                kwargs[value_key] = result[0]
        return results


def load_plugins(
    requested: Iterable[str] = (),
    extra_modules: Iterable[tuple[str, ModuleType]] = (),
) -> TrmPluginManager:
    """Build the plugin manager for one command.

    ``requested`` holds ``--plugins`` values (``a,b``, ``no:c``). ``extra_modules`` registers
    in-process plugins (tests, fault injection) as if they were entry points, switched on.
    Raises TrmError for an unknown or unavailable plugin name, listing the known names.
    """
    wanted, unwanted = parse_plugin_list(requested)
    candidates: list[tuple[str, ModuleType, str, str]] = []
    for ep in _entry_points():
        try:
            module = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take trm down
            raise TrmError(
                f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}; "
                f"fix or uninstall it, or switch it off with --plugins no:{ep.name}"
            ) from exc
        dist = ep.dist.name if ep.dist else "unknown"
        version = ep.dist.version if ep.dist else "unknown"
        candidates.append((ep.name, module, dist, version))
    for name, module in extra_modules:
        candidates.append((name, module, "(in process)", "-"))
        wanted.append(name)

    known = [name for name, *_ in candidates]
    for name in (*wanted, *unwanted):
        if name not in known:
            raise TrmError(f"unknown plugin {name!r}; known plugins: {', '.join(known)}")

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    for name, module, dist, version in candidates:
        activation = _activation(module)
        if name in unwanted:
            enabled = False
        elif name in wanted:
            if activation == "auto" and not _is_available(module):
                reason = getattr(module, "UNAVAILABLE_REASON", "its device is not present")
                raise TrmError(f"plugin {name!r} cannot run here: {reason}")
            enabled = True
        elif activation == "default":
            enabled = True
        elif activation == "auto":
            enabled = _is_available(module)
        else:
            enabled = False
        hooks = tuple(
            sorted(
                h
                for h in dir(hookspecs)
                if not h.startswith("_")
                and callable(getattr(module, h, None))
                and hasattr(getattr(module, h), "trm_impl")
            )
        )
        doc = (module.__doc__ or "").strip().splitlines()
        infos.append(
            PluginInfo(name, dist, version, activation, enabled, hooks, doc[0] if doc else "")
        )
        if enabled:
            pm.register(module, name=name)
    pm.check_pending()
    return TrmPluginManager(pm, infos)
