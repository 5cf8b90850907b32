"""The xla backend plugin's parts that need no torch_xla: when it is on, why it is off, its
choices and its errors. (Runs on the xla device itself: tests/test_xla.py, in the XLA venv.)"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import attrs
import pytest

from tests.conftest import assert_one_line_error
from trm.errors import TrmError
from trm.plugins.backends import xla
from trm.plugins.backends.xla import XlaDevices, check_divides, choose_xla_precision, tpu_generation
from trm.spec import RunSpec

HAS_TORCH_XLA = importlib.util.find_spec("torch_xla") is not None


def _devices(hardware: str = "TPU", count: int = 4) -> XlaDevices:
    kind = "TPU v4" if hardware == "TPU" else "cpu"
    return XlaDevices(hardware, kind, tpu_generation(kind), count, count, None, 1)


@pytest.mark.parametrize(
    ("kind", "generation"),
    [
        ("TPU v2", "v2"),
        ("TPU v4", "v4"),
        ("TPU v5 lite", "v5e"),
        ("TPU v5p", "v5p"),
        ("TPU v6 lite", "v6e"),
        ("cpu", None),
        ("NVIDIA H100", None),
    ],
)
def test_tpu_generation_is_read_from_the_runtime_device_kind(kind, generation):
    assert tpu_generation(kind) == generation


def test_precision_auto_is_bf16_on_a_tpu_and_fp32_on_the_cpu_runtime():
    assert choose_xla_precision("auto", _devices("TPU")) == ("bf16", [])
    assert choose_xla_precision("auto", _devices("CPU")) == ("fp32", [])
    precision, notes = choose_xla_precision("bf16", _devices("CPU"))
    assert precision == "bf16" and "emulated" in notes[0]


def test_a_global_batch_the_devices_do_not_divide_is_refused_with_a_multiple():
    base = RunSpec()
    spec = attrs.evolve(base, train=attrs.evolve(base.train, global_batch_size=6))
    with pytest.raises(TrmError, match=r"global_batch_size = 6 does not divide by the 4"):
        check_divides(spec, 4)
    check_divides(spec, 3)
    check_divides(spec, 1)


def test_resource_exhausted_is_out_of_memory_and_other_errors_are_not():
    backend = xla.XlaBackend()
    assert backend.is_out_of_memory(
        RuntimeError("RESOURCE_EXHAUSTED: Attempting to allocate 3.1G. That was not possible.")
    )
    assert not backend.is_out_of_memory(RuntimeError("INVALID_ARGUMENT: shapes differ"))
    assert not backend.is_out_of_memory(ValueError("RESOURCE exhausted? no"))


def test_the_backend_claims_xla_and_says_xla_compiles_itself():
    backend = xla.XlaBackend()
    assert backend.claims("xla") and backend.claims("xla:0")
    assert not backend.claims("xlax") and not backend.claims("cpu")
    assert "compiles it whole" in backend.compile_unavailable_reason()
    assert backend.replicas() == 1


@pytest.mark.skipif(HAS_TORCH_XLA, reason="torch_xla is installed here: the plugin is on")
def test_without_torch_xla_the_plugin_is_listed_off_and_never_imports_it(cli):
    assert not xla.is_available()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from trm.cli.main import main; "
            "code = main(['plugins']); assert 'torch_xla' not in sys.modules; sys.exit(code)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    row = next(ln for ln in out.stdout.splitlines() if ln.split()[:1] == ["xla"])
    assert row.split()[1:3] == ["no", "auto"], row
    assert "xla is off: torch_xla is not installed" in out.stdout  # and why, below the table


@pytest.mark.skipif(HAS_TORCH_XLA, reason="torch_xla is installed here: the plugin is on")
def test_asking_for_the_plugin_without_torch_xla_says_why_in_one_line(cli, tmp_path):
    result = cli("run", "quickstart", "--plugins", "xla", "--out", tmp_path / "r")
    assert_one_line_error(result, "xla", "torch_xla is not installed", "docs/tpu.md")


@pytest.mark.skipif(HAS_TORCH_XLA, reason="torch_xla is installed here: the plugin is on")
def test_without_torch_xla_runtime_device_xla_is_one_error_line(cli, tmp_path):
    result = cli("run", "quickstart", "--set", "runtime.device=xla", "--out", tmp_path / "r")
    assert_one_line_error(result, "runtime.device", "xla")
    assert not (tmp_path / "r").exists()


def test_the_compile_cache_is_left_off_on_the_cpu_device_which_cannot_load_it(
    monkeypatch, tmp_path
):
    monkeypatch.delenv("XLA_PERSISTENT_CACHE_PATH", raising=False)
    monkeypatch.setenv("TRM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert xla.use_compilation_cache() is None
    assert "XLA_PERSISTENT_CACHE_PATH" not in os.environ
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    assert xla.use_compilation_cache() == tmp_path / "xla-compile-cache"
    assert os.environ["XLA_PERSISTENT_CACHE_PATH"] == str(tmp_path / "xla-compile-cache")
    # A path the user set is theirs, on any device.
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("XLA_PERSISTENT_CACHE_PATH", str(tmp_path / "mine"))
    assert xla.use_compilation_cache() == tmp_path / "mine"
