"""Load plugins from the ``trm.plugins`` entry-point group and choose which are on.

Every plugin, built-in or third-party, is registered under that group. An entry point names
either

- a **module** — a stateless plugin: its ``@hookimpl`` functions are the hooks; or
- a **class** (``pkg.module:ClassName``) — a plugin with per-run state: the manager makes one
  instance for each plugin manager it builds, and ``trm`` builds one per command, so two runs
  in one process never share a plugin's state. Its ``@hookimpl`` methods are the hooks.

The module or class says when it is on through the attribute ``ACTIVATION``:

- ``"default"`` — on unless switched off with ``--plugins no:NAME``;
- ``"auto"`` — on when its ``is_available()`` returns True (a device exists);
- ``"opt-in"`` (also when the attribute is missing) — on only when named in ``--plugins``.

A run spec with a ``[plugins.NAME]`` table switches plugin NAME on as ``--plugins NAME``
would (the recipe carries its plugins); ``--plugins no:NAME`` still keeps it off.

A plugin named in ``--plugins`` whose ``is_available()`` returns False (its device is absent,
its package is not installed) is refused with its ``UNAVAILABLE_REASON``: one line, exit 2.

A plugin switched off with ``no:NAME`` is not even imported, so a broken third-party plugin
can be skipped. The core never imports a plugin by name; it knows plugins only through this
manager.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import pluggy
from attrs import frozen

from trm import hookspecs
from trm.errors import TrmError

ENTRY_POINT_GROUP = "trm.plugins"
# Plugins whose module imports no torch, which ``trm solve`` and ``trm.load`` ask first for a
# solver that runs without torch (trm.formats.find_solver); each is also in the group above.
SOLVER_GROUP = "trm.solvers"
ACTIVATIONS = ("default", "auto", "opt-in")


@frozen
class PluginInfo:
    """One plugin as ``trm plugins`` shows it (``hooks``: those it implements).

    ``off_reason`` says why a plugin is off, in the user's words (its own
    ``UNAVAILABLE_REASON`` when its device or library is absent, "opt-in …", "switched off by
    --plugins no:NAME"); empty when it is on.
    """

    name: str
    distribution: str
    version: str
    activation: str
    enabled: bool
    hooks: tuple[str, ...]
    description: str
    off_reason: str = ""


def _entry_points(group: str = ENTRY_POINT_GROUP) -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=group), key=lambda ep: ep.name)


def plugin_names(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """The names of the plugins installed under the entry-point group ``group``."""
    return [ep.name for ep in _entry_points(group)]


def _activation(plugin: Any) -> str:
    value = getattr(plugin, "ACTIVATION", "opt-in")
    return value if value in ACTIVATIONS else "opt-in"


def _is_available(plugin: Any) -> bool:
    check = getattr(plugin, "is_available", None)
    return bool(check()) if callable(check) else True


def _off_reason(name: str, plugin: Any, activation: str) -> str:
    """Why the plugin ``name`` is off, given it was not asked for (see ``PluginInfo``)."""
    if activation == "auto":
        return str(
            getattr(plugin, "UNAVAILABLE_REASON", "")
            or "what it needs is not here (its is_available() is False)"
        )
    return f"opt-in: --plugins {name} or a spec's [plugins.{name}] table switches it on"


def _description(plugin: Any) -> str:
    doc = inspect.getdoc(plugin) or inspect.getdoc(inspect.getmodule(plugin)) or ""
    lines = doc.strip().splitlines()
    return lines[0] if lines else ""


def implemented_hooks(pm: pluggy.PluginManager, plugin: Any) -> tuple[str, ...]:
    """The trm hooks ``plugin`` implements, found as pluggy finds them when registering."""
    return tuple(
        sorted(
            name
            for name in dir(plugin)
            if hasattr(pm.hook, name) and pm.parse_hookimpl_opts(plugin, name) is not None
        )
    )


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

    def __init__(
        self, pm: pluggy.PluginManager, infos: list[PluginInfo], from_spec: Iterable[str] = ()
    ) -> None:
        self.pm = pm
        self.infos = infos
        self.from_spec = frozenset(from_spec)  # switched on by a spec's [plugins.NAME] only

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def enabled_names(self) -> list[str]:
        return [info.name for info in self.infos if info.enabled]

    def device_backends(self) -> list[Any]:
        """Every ``DeviceBackend`` the enabled plugins offer (``device_backends`` hook)."""
        return [backend for part in self.pm.hook.device_backends() for backend in part or ()]

    def dense_optimizers(self) -> list[Any]:
        """Every ``DenseOptimizer`` the enabled plugins offer (``dense_optimizers`` hook), each
        marked with the plugin that offered it. TrmError naming the plugin when its hook
        raises or answers something else than a list of well-formed entries."""
        from trm.model.dense_optimizer import offered_by

        # in pluggy's call order (the last registered first), one plugin at a time, so that
        # a failure names its plugin
        return [
            entry
            for impl in reversed(self.pm.hook.dense_optimizers.get_hookimpls())
            for entry in offered_by(impl.plugin_name, impl.function)
        ]

    def dense_optimizer(self, name: str) -> Any:
        """The enabled plugins' ``DenseOptimizer`` called ``name`` (``train.optimizer``);
        TrmError when none or several are, or its package is missing."""
        from trm.model.dense_optimizer import choose_dense_optimizer

        return choose_dense_optimizer(self.dense_optimizers(), name)

    def backend_plugins_off(self) -> list[str]:
        """Installed plugins that offer backends but are off here (their device is absent,
        or they are opt-in)."""
        return [
            info.name for info in self.infos if not info.enabled and "device_backends" in info.hooks
        ]

    def describe_enabled(self) -> str:
        """The enabled plugins for the ``plugins on:`` line; one a spec's table switched on
        says so (``curriculum (by [plugins.curriculum])``)."""
        return ", ".join(
            f"{info.name} (by [plugins.{info.name}])" if info.name in self.from_spec else info.name
            for info in self.infos
            if info.enabled
        )

    def api_function(self, name: str) -> Any:
        """The function named ``name`` that an enabled plugin lends the Python API
        (``api_functions`` hook); TrmError when none or several do."""
        offered = [part[name] for part in self.pm.hook.api_functions() if part and name in part]
        if len(offered) != 1:
            how = "no enabled plugin offers" if not offered else "several plugins offer"
            raise TrmError(f"{how} the Python API's {name!r}; see `trm plugins`")
        return offered[0]

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


def _load(ep: metadata.EntryPoint) -> Any:
    """The entry point's module, or a fresh instance of its class."""
    try:
        target = ep.load()
    except Exception as exc:  # a broken third-party plugin must not take trm down silently
        raise TrmError(
            f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}; "
            f"fix or uninstall it, or switch it off with --plugins no:{ep.name}"
        ) from exc
    return target() if inspect.isclass(target) else target


def load_plugins(
    requested: Iterable[str] = (),
    extra_modules: Iterable[tuple[str, Any]] = (),
    spec_tables: Iterable[str] = (),
    broken: list[str] | None = None,
    group: str = ENTRY_POINT_GROUP,
) -> TrmPluginManager:
    """Build the plugin manager for one command.

    ``requested`` holds ``--plugins`` values (``a,b``, ``no:c``). ``spec_tables`` names the
    run spec's ``[plugins.NAME]`` tables: those plugins are switched on too, unless ``no:NAME``
    (a name no plugin has is left to the spec check, which names the table).
    ``broken``, when given, collects the one-line error of each plugin that fails to import,
    which is then left out (``trm``'s parser, so that every other command still works);
    without it such a plugin is a TrmError.
    ``extra_modules`` registers
    in-process plugins (modules or objects: tests, fault injection, the bench's timer),
    switched on; one with an installed plugin's name replaces that plugin. ``group`` is the
    entry-point group read (:data:`SOLVER_GROUP`: the torch-free plugins only). Raises TrmError
    for an unknown or unavailable plugin name, listing the known names.
    """
    wanted, unwanted = parse_plugin_list(requested)
    extras = dict(extra_modules)
    candidates: list[tuple[str, Any, str, str]] = []
    skipped: list[tuple[str, str, str]] = []
    for ep in _entry_points(group):
        dist = ep.dist.name if ep.dist else "unknown"
        version = ep.dist.version if ep.dist else "unknown"
        if ep.name in extras:
            continue
        if ep.name in unwanted:
            skipped.append((ep.name, dist, version))
            continue
        try:
            plugin = _load(ep)
        except TrmError as exc:
            if broken is None:
                raise
            broken.append(str(exc))
            continue
        candidates.append((ep.name, plugin, dist, version))
    for name, plugin in extras.items():
        candidates.append((name, plugin, "(in process)", "-"))
        wanted.append(name)

    known = [name for name, *_ in candidates] + [name for name, *_ in skipped]
    for name in (*wanted, *unwanted):
        if name not in known:
            raise TrmError(f"unknown plugin {name!r}; known plugins: {', '.join(sorted(known))}")
    from_spec = [n for n in spec_tables if n in known and n not in (*wanted, *unwanted)]
    wanted += from_spec

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    for name, plugin, dist, version in candidates:
        activation = _activation(plugin)
        if name in wanted:
            if not _is_available(plugin):
                reason = getattr(plugin, "UNAVAILABLE_REASON", "its device is not present")
                by = f" (the spec's [plugins.{name}] switches it on)" if name in from_spec else ""
                raise TrmError(
                    f"plugin {name!r}{by} cannot run here: {reason}"
                    + (f"; or keep it off with --plugins no:{name}" if by else "")
                )
            enabled = True
        elif activation == "default":
            enabled = True
        elif activation == "auto":
            enabled = _is_available(plugin)
        else:
            enabled = False
        hooks = implemented_hooks(pm, plugin)
        off = "" if enabled else _off_reason(name, plugin, activation)
        infos.append(
            PluginInfo(name, dist, version, activation, enabled, hooks, _description(plugin), off)
        )
        if enabled:
            pm.register(plugin, name=name)
    for name, dist, version in skipped:
        infos.append(
            PluginInfo(
                name,
                dist,
                version,
                "-",
                False,
                (),
                "switched off (not loaded)",
                f"switched off by --plugins no:{name}",
            )
        )
    infos.sort(key=lambda info: info.name)
    pm.check_pending()
    return TrmPluginManager(pm, infos, from_spec)
