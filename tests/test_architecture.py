"""The import rules of docs/architecture.md hold (import-linter), and would catch a plugin
that imports the loop."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = shutil.which("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def installed_copy(tmp_path_factory) -> Path:
    """A plain (not editable) copy of the trm package, as import-linter needs it."""
    tree = tmp_path_factory.mktemp("lint")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    command += ["--no-build-isolation", "--target", str(tree), str(ROOT)]
    subprocess.run(command, check=True, capture_output=True)
    return tree


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")
def test_the_import_contracts_hold(installed_copy):
    result = _lint(installed_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")
def test_a_plugin_importing_the_loop_breaks_a_contract(installed_copy, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(installed_copy, tree)
    progress = tree / "trm" / "plugins" / "operations" / "progress.py"
    progress.write_text(progress.read_text() + "\nfrom trm.loop import Trainer  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "Plugins and contrib never import the loop, the planner or the CLI BROKEN" in (
        " ".join(result.stdout.split())
    )
    assert "trm.plugins.operations.progress -> trm.loop" in result.stdout


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")
def test_a_command_plugin_importing_the_loop_breaks_the_public_parts_contract(
    installed_copy, tmp_path
):
    tree = tmp_path / "tree"
    shutil.copytree(installed_copy, tree)
    build = tree / "trm" / "plugins" / "report" / "build.py"
    build.write_text(build.read_text() + "\nfrom trm.loop import Trainer  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "import only the core's public parts BROKEN" in " ".join(result.stdout.split())
    assert "trm.plugins.report.build -> trm.loop" in result.stdout
