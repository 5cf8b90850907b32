"""A backend is a plugin: an out-of-tree package claims a new device name and trains the
quickstart through ``trm run`` with no change to trm; the core holds no device-type branch.

The package (tests/fixtures/trm_cpu_checked: its own pyproject.toml, registered under the
``trm.plugins`` entry-point group) is installed with pip into a folder of its own and put on
the path of a ``trm`` subprocess, as ``pip install trm-cpu-checked`` would put it in a venv.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from tests.out_of_tree import pip_install_target

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "fixtures" / "trm_cpu_checked"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has trm-cpu-checked installed."""
    site = pip_install_target(PACKAGE, tmp_path_factory)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def trm(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trm", *args], env=env, cwd=cwd, capture_output=True, text=True
    )


@pytest.mark.slow
def test_an_installed_backend_trains_the_quickstart(installed, tmp_path):
    listed = trm(installed, "plugins", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = {p["name"]: p for p in json.loads(listed.stdout)["plugins"]}
    assert "device_backends" in names["cpu-checked"]["hooks"]

    run = tmp_path / "run"
    result = trm(
        installed,
        "run",
        "quickstart",
        "--set",
        "runtime.device=cpu-checked",
        "--set",
        "train.global_batch_size=32",
        "--set",
        "train.eval_interval=6",
        "--set",
        "data.generate.count=200",
        "--set",
        "data.generate.test_count=32",
        "--max-steps",
        "12",
        "--out",
        str(run),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "cpu-checked: counting host transfers" in result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "cpu-checked" and summary["steps"] == 12
    counts = json.loads((run / "cpu-checked.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "kind" not in r] == list(range(1, 13))
    evaluations = sum(1 for r in rows if r.get("kind") == "eval")
    assert evaluations == 2
    # one host read and one step boundary per optimizer step, and per evaluation one read and
    # one boundary per batch (its 32 puzzles are one batch); batches: one per step, plus the
    # first carry's template and the evaluation batches
    assert counts["read_values"] == 12 + evaluations
    assert counts["mark_step"] == 12 + evaluations
    assert counts["to_device"] > 12


def test_an_unknown_device_names_the_installed_backends(installed, tmp_path):
    result = trm(
        installed,
        "run",
        "quickstart",
        "--set",
        "runtime.device=npu",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("trm: error:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "'npu'" in lines[0] and "cpu-checked" in lines[0] and "cpu" in lines[0]
    assert not (tmp_path / "run").exists()


def test_an_unknown_device_in_process(cli, tmp_path):
    result = cli("estimate", "quickstart", "--set", "runtime.device=tpu9")
    assert result.code == 2
    assert "no backend plugin claims 'tpu9'" in result.err and "cpu" in result.err


# ------------------------------------------------------------------ no device branch in core

DEVICE_NAMES = {"cuda", "mps", "xla", "xpu", "npu", "tpu"}
DEVICE_MODULES = (
    "torch.cuda",
    "torch.mps",
    "torch.backends.cuda",
    "torch.backends.mps",
    "torch_xla",
)
# The two numerics choices the model owns (it may not import the device layer): torch's fused
# AdamW kernel exists for CUDA and CPU tensors, and MPS has no float64 for stable-max.
MODEL_EXCEPTIONS = {("model/optim.py", "cuda"), ("model/losses.py", "mps")}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def device_branches(path: Path) -> list[tuple[int, str]]:
    """Lines of ``path`` that use a device's own torch module or compare with a device name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and _dotted(node).startswith(DEVICE_MODULES):
            found.append((node.lineno, _dotted(node)))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            found += [(node.lineno, n) for n in names if n.startswith(DEVICE_MODULES)]
        elif isinstance(node, ast.Compare):
            for part in ast.walk(node):
                if isinstance(part, ast.Constant) and part.value in DEVICE_NAMES:
                    found.append((node.lineno, part.value))
    return found


def test_no_device_type_branch_in_core_outside_the_device_protocol():
    core = ROOT / "core"
    branches = []
    for path in sorted(core.rglob("*.py")):
        relative = path.relative_to(core).as_posix()
        for line, what in device_branches(path):
            if (relative, what) not in MODEL_EXCEPTIONS:
                branches.append(f"core/{relative}:{line}: {what}")
    assert branches == []


def test_the_branch_finder_finds_branches(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\nif device.type == 'cuda':\n    torch.cuda.synchronize()\n"
        "x = 'mps' in names\n"
    )
    assert sorted({line for line, _ in device_branches(sample)}) == [2, 3, 4]


# ------------------------------------------------ no cuda/mps name in core or the planner

QUOTED_DEVICE_NAME = re.compile(r"""["'](cuda|mps)(:\d+)?["']""")
SCANNED = ("core", "plugins/planning")
# The model's two numerics choices, one line each (see MODEL_EXCEPTIONS).
NAMED_IN = {("core/model/optim.py", "cuda"), ("core/model/losses.py", "mps")}


def quoted_device_names(path: Path) -> list[tuple[int, str]]:
    """Lines of ``path`` (code, comments and docstrings alike) that quote "cuda" or "mps"."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        (n, m.group(1))
        for n, line in enumerate(lines, 1)
        for m in QUOTED_DEVICE_NAME.finditer(line)
    ]


def test_core_and_the_planner_name_no_cuda_or_mps_device_but_the_models_numerics():
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            found += [(relative, line, name) for line, name in quoted_device_names(path)]
    unexpected = [f"{p}:{line}: {name}" for p, line, name in found if (p, name) not in NAMED_IN]
    assert unexpected == []
    assert sorted((p, name) for p, _, name in found) == sorted(NAMED_IN)  # one line each


def test_the_name_finder_finds_quoted_device_names(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        'x = ("cuda", "mps")\n# runtime.device = "cuda:1"\ny = f"{a}:{b}"\nz = "mpsx"\n'
        "w = 'mps'\n"
    )
    assert [line for line, _ in quoted_device_names(sample)] == [1, 1, 2, 5]


# ------------------------------------------------------------ the contract's older names


def test_a_backend_written_with_the_older_names_still_answers_the_current_ones():
    """``is_available()`` (the reason or None) and the class variables ``has_device_memory``
    and ``process_groups`` answer for ``unavailable_reason()``, ``uses_device_memory()`` and
    ``process_group_backends()``, each with a DeprecationWarning naming the current one."""
    from trm.device.contract import DeviceBackend

    with pytest.warns(DeprecationWarning) as warned:

        class OlderNpu(DeviceBackend):
            name = torch_type = "npu"
            has_device_memory = True
            process_groups: ClassVar[dict[str, str]] = {"npu": "hccl"}

            def is_available(self):
                return "no NPU driver"

    named = {str(w.message).split("define ")[1].split()[0] for w in warned}
    assert named == {"unavailable_reason()", "uses_device_memory()", "process_group_backends()"}
    backend = OlderNpu()
    assert backend.unavailable_reason() == "no NPU driver"
    assert backend.uses_device_memory() is True
    assert backend.process_group_backends() == {"npu": "hccl"}

    class CurrentNpu(DeviceBackend):
        name = torch_type = "npu"

    assert CurrentNpu().unavailable_reason() is None
    assert CurrentNpu().uses_device_memory() is False
