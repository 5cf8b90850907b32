"""The plugin manager: entry points, activation, --plugins on/off, trm plugins output."""

from __future__ import annotations

import json
import types

import pytest

from trm import hookimpl
from trm.errors import TrmError
from trm.plugin_manager import load_plugins, parse_plugin_list

BUILT_IN_DEFAULTS = {"cpu", "checkpoint", "progress", "sudoku"}


def test_built_in_plugins_come_from_entry_points_and_are_on_by_default():
    pm = load_plugins()
    names = {info.name for info in pm.infos}
    assert names >= BUILT_IN_DEFAULTS
    assert set(pm.enabled_names()) >= BUILT_IN_DEFAULTS
    assert all(info.distribution == "trm" for info in pm.infos if info.name in BUILT_IN_DEFAULTS)


def test_no_prefix_switches_a_default_plugin_off():
    pm = load_plugins(["no:progress"])
    assert "progress" not in pm.enabled_names()
    assert pm.pm.get_plugin("progress") is None


def test_unknown_plugin_is_an_error_listing_known_names():
    with pytest.raises(TrmError, match=r"unknown plugin 'nosuch'.*cpu"):
        load_plugins(["nosuch"])


def test_parse_plugin_list_splits_commas_and_no_prefix():
    assert parse_plugin_list(["a,b", "no:c", ""]) == (["a", "b"], ["c"])


def test_in_process_plugin_hooks_are_called_and_listed():
    module = types.ModuleType("fake")
    calls = []

    @hookimpl
    def on_train_end(summary):  # takes only the argument it uses
        calls.append(summary)

    module.on_train_end = on_train_end
    pm = load_plugins(["no:progress"], extra_modules=[("fake", module)])
    pm.hook.on_train_end(state=None, summary={"x": 1})
    assert calls == [{"x": 1}]
    info = next(i for i in pm.infos if i.name == "fake")
    assert info.enabled and info.hooks == ("on_train_end",)


def test_adapt_config_is_chained_in_call_order_each_seeing_the_previous_result():
    def make(name, factor):
        module = types.ModuleType(name)

        @hookimpl
        def adapt_config(spec):
            return spec * factor, [("x", spec, spec * factor, name)]

        module.adapt_config = adapt_config
        return name, module

    pm = load_plugins(["no:cpu"], extra_modules=[make("double", 2), make("triple", 3)])
    results = pm.call_chained(
        "adapt_config", "spec", spec=1, hardware=None, estimate=None, mode="balanced"
    )
    # pluggy calls the later-registered plugin first: triple sees 1, double sees 3
    assert [r[0] for r in results] == [3, 6]


def test_trm_plugins_json_lists_hooks_and_state(cli):
    result = cli("plugins", "--json")
    assert result.code == 0
    doc = json.loads(result.out)
    by_name = {p["name"]: p for p in doc["plugins"]}
    assert "save_checkpoint" in by_name["checkpoint"]["hooks"]
    assert by_name["cpu"]["enabled"] is True
    assert by_name["cpu"]["version"]


@pytest.mark.parametrize("columns", [80, 160])
def test_trm_plugins_table_shows_every_hook_name_whole(cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    result = cli("plugins")
    assert result.code == 0
    doc = json.loads(cli("plugins", "--json").out)
    for plugin in doc["plugins"]:
        for hook in plugin["hooks"]:
            assert hook in result.out, (plugin["name"], hook)
    assert ("what it does" in result.out) == (columns >= 120)


def test_trm_plugins_says_why_each_off_plugin_is_off(cli, monkeypatch):
    unavailable = types.SimpleNamespace(
        ACTIVATION="auto",
        UNAVAILABLE_REASON="the frobnicator library is not installed",
        is_available=lambda: False,
    )
    pm = load_plugins(["no:mkl"], extra_modules=[])
    by_name = {info.name: info for info in pm.infos}
    assert by_name["mkl"].off_reason == "switched off by --plugins no:mkl"
    assert by_name["thermal"].off_reason.startswith("opt-in: --plugins thermal")
    assert by_name["cpu"].off_reason == ""  # on
    # An auto plugin whose library or device is absent gives its own reason.
    from trm import plugin_manager

    assert plugin_manager._off_reason("frob", unavailable, "auto") == (
        "the frobnicator library is not installed"
    )
    monkeypatch.setenv("COLUMNS", "80")
    table = cli("plugins").out
    for info in load_plugins().infos:  # each plugin that would switch itself on says why not
        if info.activation == "auto" and not info.enabled:
            assert f"{info.name} is off: {info.off_reason}" in table.replace("\n", " ")
    assert "thermal is off" not in table  # opt-in: the activation column says so
    doc = json.loads(cli("plugins", "--json").out)
    xla = {p["name"]: p for p in doc["plugins"]}.get("xla")
    if xla is not None and not xla["enabled"]:  # the main venv has no torch_xla
        assert "torch_xla is not installed" in xla["off_reason"]
        assert "torch_xla is not installed" in table
