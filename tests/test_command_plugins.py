"""Commands and model formats as plugins (``register_commands``, ``register_formats``):
``trm --help`` names the plugin that brings each command; a third party's package installed
with pip adds a command and an export format that ``trm export``, ``trm.load`` and
``--init-from`` use; broken command plugins are one warning line each and ``trm`` still
works; and neither ``import trm`` nor ``trm --help`` imports Optuna, matplotlib or
safetensors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.out_of_tree import pip_install_target
from tests.tiny_run import build_tiny_data, write_spec
from trm.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
TIMEOUT_S = 300.0
HEAVY = ("optuna", "matplotlib", "safetensors")


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _trm(env: dict[str, str] | None, *args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trm", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_help_names_the_plugin_that_brings_each_plugin_command():
    text = build_parser().format_help()
    for command, plugin in [
        ("sweep", "studies"),
        ("report", "report"),
        ("import", "formats"),
        ("export", "formats"),
    ]:
        line = next(line for line in text.splitlines() if line.strip().startswith(command + " "))
        assert f"[{plugin}]" in line or f"[{plugin}]" in text.split(line, 1)[1].splitlines()[1]


def test_a_plugin_switched_off_takes_its_commands_with_it(cli):
    result = cli("--plugins", "no:studies", "sweep", "study.toml")
    assert result.code == 2
    assert "invalid choice: 'sweep'" in result.err


@pytest.mark.parametrize("code", ["import trm", "from trm.cli.main import main; main(['--help'])"])
def test_neither_import_trm_nor_help_imports_optuna_matplotlib_or_safetensors(code):
    probe = (
        f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture(scope="module")
def npz(tmp_path_factory) -> SimpleNamespace:
    """trm-npz-format installed with pip, and a tiny trained run."""
    site = pip_install_target(FIXTURES / "trm_npz_format", tmp_path_factory)
    base = tmp_path_factory.mktemp("npz")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    return SimpleNamespace(env=_env(site), base=base, spec=spec, run=run_dir)


def test_an_installed_package_adds_a_command_shown_with_its_plugin(npz):
    done = _trm(npz.env, "--help")
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "npz-info" in line)
    assert "[npz-format]" in line
    assert "sweep" in done.stdout and "warning" not in done.stderr


def test_an_installed_format_exports_and_is_read_back_as_the_same_model(npz):
    folder = npz.base / "exported"
    done = _trm(npz.env, "export", npz.run, "--format", "npz", "--out", folder, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["step"] == 12
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "weights.npz"]

    info = _trm(npz.env, "npz-info", folder, "--json")
    assert info.returncode == 0, info.stderr
    compare = (
        "import sys, json, torch, trm\n"
        "run, exported = trm.load(sys.argv[1]), trm.load(sys.argv[2])\n"
        "a, b = run.module.state_dict(), exported.module.state_dict()\n"
        "print(json.dumps({'same': a.keys() == b.keys() and all(torch.equal(a[k], b[k]) "
        "for k in a), 'parameters': sum(t.numel() for t in a.values())}))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", compare, str(npz.run), str(folder)],
        env=npz.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert loaded.returncode == 0, loaded.stderr
    result = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert result["same"] is True
    assert json.loads(info.stdout)["parameters"] == result["parameters"]

    again = _trm(npz.env, "run", npz.spec, "--out", npz.base / "again", "--init-from", folder)
    assert again.returncode == 0, again.stderr
    assert f"init-from: starting from the weights of npz folder {folder}" in again.stderr


def test_a_formats_own_option_with_another_format_is_refused_in_one_line(npz):
    out = npz.base / "refused"
    done = _trm(npz.env, "export", npz.run, "--format", "hf", "--out", out, "--float16")
    assert done.returncode == 2
    assert done.stderr.strip() == "trm: error: --float16 applies to --format npz only; leave it out"
    assert not out.exists()


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, str]:
    return _env(pip_install_target(FIXTURES / "trm_broken_commands", tmp_path_factory))


def test_broken_command_plugins_are_one_warning_each_and_trm_still_works(broken):
    done = _trm(broken, "--help")
    assert done.returncode == 0, done.stderr
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 3, done.stderr
    assert all(line.startswith("trm: warning: ") for line in warnings)
    for name in ("unimportable", "raising", "clashing"):
        assert sum(name in line for line in warnings) == 1, done.stderr
    assert "'run' is already trm's own" in done.stderr
    assert "half-added" not in done.stdout
    assert "Traceback" not in done.stderr
    for command in ("run", "sweep", "report", "export"):
        assert f"    {command} " in done.stdout


def test_switching_broken_plugins_off_silences_them(broken):
    done = _trm(broken, "plugins", "--plugins", "no:unimportable,no:raising,no:clashing")
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr


def test_the_api_reaches_a_plugins_function_by_name_and_refuses_one_switched_off():
    from trm.errors import TrmError
    from trm.plugin_manager import load_plugins

    assert callable(load_plugins().api_function("sweep"))
    with pytest.raises(TrmError, match="no enabled plugin offers the Python API's 'sweep'"):
        load_plugins(["no:studies"]).api_function("sweep")
