"""The runtime a restored model is scored and solved with (trm.plan.pipeline.runtime_here):
a half precision it was trained in becomes this machine's best, never an emulated one."""

from __future__ import annotations

import pytest
import torch

from trm.hardware import HardwareProfile
from trm.plan.pipeline import runtime_here
from trm.plugin_manager import load_plugins
from trm.plugins.backends import cpu
from trm.spec import ArchSpec, RunSpec, RuntimeSpec

SMALL = ArchSpec(hidden_size=64, num_heads=4)


@pytest.fixture(autouse=True)
def _keep_threads(monkeypatch):
    monkeypatch.setattr(cpu, "allowed_cpu_count", lambda: 2)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _hardware(native_bf16: bool) -> HardwareProfile:
    return HardwareProfile(physical_cores=1, logical_cores=2, cpu_native_bf16=native_bf16)


@pytest.mark.parametrize(
    ("device", "trained", "native", "expected"),
    [
        ("cpu", "bf16", False, "fp32"),  # would be emulated: fp32 instead
        ("cpu", "bf16", True, "bf16"),
        ("cpu", "fp16", False, "fp32"),
        ("cpu", "fp32", True, "fp32"),  # fp32 is kept even where bf16 is native
        ("cuda", "bf16", False, "fp32"),  # trained on a GPU, scored on this CPU
        ("cuda", "bf16", True, "bf16"),
    ],
)
def test_a_half_precision_checkpoint_runs_in_the_best_precision_here(
    device, trained, native, expected
):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is here: the checkpoint's device is available")
    spec = RunSpec(arch=SMALL, runtime=RuntimeSpec(device=device, precision=trained))
    said: list[str] = []
    runtime = runtime_here(load_plugins(), spec, _hardware(native), said.append)
    assert runtime.device == "cpu"
    assert runtime.precision == expected
    assert not any("emulated" in line for line in said)
    assert any("not available here" in line for line in said) is (device == "cuda")
