"""``trm bench`` on a device with a memory budget of its own trains what ``trm run`` would
(the planned micro-batch), times the plain fp32 loop at a batch that fits, and turns an
out-of-memory error into one line. The device here is a CPU backend that claims a small
device budget (on an H200 the whole global batch of 768 runs the plain loop out of its
139 GiB)."""

from __future__ import annotations

import attrs
import pytest
import torch

from trm import hookimpl
from trm.device.contract import DeviceBackend
from trm.memory import DEFAULT_MODE
from trm.plan.pipeline import choose_runtime, detect_hardware, plan_run
from trm.plugin_manager import load_plugins
from trm.plugins.measure import bench
from trm.plugins.measure.bench import CPU_DEFAULT_BATCH, choose_batches
from trm.runtime import RuntimeChoice
from trm.spec import load_spec, resolve_spec_path

BUDGET_BYTES = 512 * 2**20
MODE_SHARE = 0.75  # the balanced tier's share of the budget


class BudgetDevice(DeviceBackend):
    """The CPU, posing as a device with BUDGET_BYTES of memory of its own."""

    name = "cpu-budget"
    torch_type = "cpu"

    def uses_device_memory(self):
        return True

    def budget_bytes(self, hardware, device):
        return BUDGET_BYTES

    def compile_unavailable_reason(self):
        return "cpu-budget runs eager"


class BudgetBackend:
    def __init__(self) -> None:
        self.device = BudgetDevice()

    @hookimpl
    def device_backends(self):
        return [self.device]

    @hookimpl
    def configure_runtime(self, spec, hardware):
        if spec.runtime.device != self.device.name:
            return None
        return RuntimeChoice(
            device="cpu", precision="fp32", threads=1, compile=False, backend=self.device
        )


def large_batch_spec(device: str):
    spec = load_spec(resolve_spec_path("quickstart"))
    return attrs.evolve(
        spec,
        train=attrs.evolve(spec.train, global_batch_size=4096),
        runtime=attrs.evolve(spec.runtime, device=device),
    )


@pytest.fixture
def budget_plugins():
    return load_plugins([], extra_modules=[("cpu-budget", BudgetBackend())])


def estimate_fits(pm, spec, hardware, micro: int, tmp_path) -> bool:
    """Whether ``spec`` at micro-batch ``micro`` fits the default tier's share of the budget."""
    fixed = attrs.evolve(spec, runtime=attrs.evolve(spec.runtime, micro_batch_size=micro))
    plan = plan_run(pm, fixed, None, tmp_path, hardware=hardware)
    return plan.estimate.fits(MODE_SHARE)


def test_a_device_budget_sets_both_loops_batches_from_the_plan(budget_plugins, tmp_path):
    pm = budget_plugins
    spec = large_batch_spec("cpu-budget")
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    batches = choose_batches(pm, spec, hardware, runtime, None)
    planned = plan_run(pm, spec, DEFAULT_MODE, tmp_path, hardware=hardware)
    assert batches.trm == planned.spec.runtime.micro_batch_size < 4096
    assert estimate_fits(pm, spec, hardware, batches.trm, tmp_path)
    assert batches.spec.runtime.micro_batch_size == batches.trm
    plain_spec = attrs.evolve(
        spec,
        runtime=attrs.evolve(
            spec.runtime, precision="fp32", compile="off", activation_checkpointing="off"
        ),
    )
    assert 1 <= batches.plain <= batches.trm
    assert estimate_fits(pm, plain_spec, hardware, batches.plain, tmp_path)
    assert any("plan's micro-batch" in note for note in batches.notes)


def test_an_asked_batch_is_kept_for_trm_and_capped_for_the_plain_loop(budget_plugins):
    pm = budget_plugins
    spec = large_batch_spec("cpu-budget")
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    fitted = choose_batches(pm, spec, hardware, runtime, None)
    batches = choose_batches(pm, spec, hardware, runtime, 4096)
    assert batches.trm == 4096
    assert batches.plain == fitted.plain < 4096


def test_on_the_cpu_both_loops_take_the_spec_batch_capped(tmp_path):
    pm = load_plugins([])
    spec = large_batch_spec("cpu")
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    batches = choose_batches(pm, spec, hardware, runtime, None)
    assert batches.trm == batches.plain == CPU_DEFAULT_BATCH
    assert batches.spec == spec and batches.notes == ()
    assert choose_batches(pm, spec, hardware, runtime, 7).plain == 7


def test_running_out_of_memory_in_a_timed_loop_is_one_line(cli, monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.34 GiB. More")

    monkeypatch.setattr(bench, "time_plain_loop", out_of_memory)
    result = cli(
        "bench",
        "quickstart",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--batch",
        "8",
        "--peak-seconds",
        "0.05",
    )
    assert result.code == 2, result.err
    lines = [line for line in result.err.splitlines() if line.startswith("trm: error:")]
    assert "Traceback" not in result.err and len(lines) == 1
    assert "the plain loop ran out of cpu memory at 8 samples a step" in lines[0]
    assert "Tried to allocate" not in lines[0] and "--batch" in lines[0]


def test_another_error_in_a_timed_loop_is_not_called_out_of_memory(monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("not a memory problem")

    runtime = RuntimeChoice(device="cpu", precision="fp32", threads=1, compile=False)
    assert bench.out_of_memory_error(runtime, "x", 1, ValueError("no")) is None
    monkeypatch.setattr(bench, "time_plain_loop", broken)
    with pytest.raises(ValueError), bench._memory_error(runtime, "the plain loop", 8):
        bench.time_plain_loop()
