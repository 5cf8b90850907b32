"""The first GPU run: what a careful read found would break or be slow on CUDA/NCCL/MPS, each
tested here on the CPU with fake ``torch.cuda``/``torch.mps`` functions, injected failures and
counted calls (issue "The first GPU run just works"; the host-sync budget is
tests/test_host_syncs.py). Nothing here has run on a GPU: ``benchmarks/gpu.py`` does that.
"""

from __future__ import annotations

import importlib.util
import json
import os

import attrs
import pytest
import torch
import torch._dynamo.exc as dynamo_exc

from tests.tiny_run import build_tiny_data, events, summary, write_spec
from trm.cli.main import main
from trm.device import distributed
from trm.device.contract import DeviceBackend
from trm.device.rng import capture_rng, restore_rng
from trm.errors import TrmError
from trm.hardware import HardwareProfile
from trm.model.sparse_embedding import summed_per_id
from trm.plugins.backends import cpu, cuda, mps
from trm.spec import RunSpec, RuntimeSpec


class FakeProps:
    def __init__(self, index: int) -> None:
        self.major, self.minor, self.name = 9, 0, f"Fake H100 #{index}"
        self.total_memory = 80 * 2**30


@pytest.fixture
def eight_gpus(monkeypatch):
    """torch.cuda with eight GPUs; records set_device and mem_get_info calls in order."""
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_properties", FakeProps)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.append(("set_device", i)))

    def mem_get_info(index=None):
        calls.append(("mem_get_info", index))
        return (70 * 2**30, 80 * 2**30)

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    return calls


# 1. torchrun on an 8-GPU node: each rank touches its own GPU only


def test_each_rank_reads_free_memory_of_its_own_gpu_only_after_selecting_it(
    eight_gpus, monkeypatch
):
    monkeypatch.setenv("LOCAL_RANK", "3")
    profile = cuda.detect_hardware()
    assert eight_gpus == [("set_device", 3), ("mem_get_info", 3)]
    gpus = profile.accelerators
    assert len(gpus) == 8 and gpus[3].memory_free_bytes == 70 * 2**30
    assert all(g.memory_free_bytes is None for g in gpus if g.index != 3)
    assert cuda.CUDA.budget_bytes(profile, torch.device("cuda:3")) == 80 * 2**30
    assert [a.generation for a in profile.accelerators] == ["sm_90"] * 8


# 5. more ranks than visible GPUs: one line, not torch's assertion


def test_a_local_rank_without_a_gpu_is_a_clear_error(eight_gpus, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(TrmError, match=r"LOCAL_RANK 1 needs GPU 1.*sees 1 GPU.*VISIBLE_DEVICES=1"):
        cuda.configure_runtime(RunSpec(), HardwareProfile())
    with pytest.raises(TrmError, match="LOCAL_RANK 1"):
        cuda.detect_hardware()


def test_cuda_colon_n_picks_that_gpu_in_one_process(eight_gpus, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    spec = RunSpec(runtime=RuntimeSpec(device="cuda:5"))
    choice = cuda.configure_runtime(spec, HardwareProfile())
    assert choice.device == "cuda:5" and choice.backend is cuda.CUDA
    with pytest.raises(TrmError, match="'cuda:9'"):
        cuda.configure_runtime(RunSpec(runtime=RuntimeSpec(device="cuda:9")), HardwareProfile())


# 2. torch.compile on CUDA needs more than Triton; a failure at the first step falls back


def test_cuda_compile_needs_triton_a_c_compiler_and_python_headers(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(cuda, "c_compiler", lambda: None)
    assert "C compiler" in cuda.CUDA.compile_unavailable_reason()
    monkeypatch.setattr(cuda, "c_compiler", lambda: "/usr/bin/gcc")
    monkeypatch.setattr(cuda, "python_headers", lambda: None)
    assert "Python headers" in cuda.CUDA.compile_unavailable_reason()
    monkeypatch.setattr(cuda, "python_headers", lambda: "/usr/include/python3.11")
    assert cuda.CUDA.compile_unavailable_reason() is None


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return build_tiny_data(tmp_path_factory.mktemp("gpu-ready") / "data")


def test_a_compile_failure_at_the_first_step_runs_the_step_again_eager(
    tiny_data, tmp_path, monkeypatch, capsys
):
    eager = tmp_path / "eager"
    assert main(["run", str(write_spec(tmp_path / "a", tiny_data)), "--out", str(eager)]) == 0

    def failing_compile(net):
        def compiled_call(*args, **kwargs):
            raise dynamo_exc.BackendCompilerFailed(
                "inductor", RuntimeError("Failed to find C compiler. Please specify via CC"), None
            )

        net._compiled_call_impl = compiled_call

    monkeypatch.setattr(cpu.CPU, "compile", failing_compile)
    monkeypatch.setattr(cpu, "cpp_compiler", lambda: "/usr/bin/g++")
    # the CPU lays a compiled MLP network out token-major, which rounds differently from the
    # eager run's position-major layout; pinned, so the weights compare bit for bit
    monkeypatch.setattr(cpu.CPU, "position_major_mlp", lambda compiled: True)
    spec = write_spec(tmp_path / "b", tiny_data)
    failed = tmp_path / "failed"
    capsys.readouterr()
    code = main(["run", str(spec), "--out", str(failed), "--set", "runtime.compile=on"])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if "torch.compile failed" in line]
    assert len(lines) == 1 and "BackendCompilerFailed" in lines[0] and "eager" in lines[0]
    assert [e["step"] for e in events(failed, "compile_failed")] == [1]
    assert summary(failed)["final_weights_sha256"] == summary(eager)["final_weights_sha256"]


def test_a_failed_graph_capture_runs_the_step_again_compiled_without_graphs(
    tiny_data, tmp_path, monkeypatch, capsys
):
    """CUDA graphs fall back, said once: a runtime that replays graphs (as the cuda backend's
    with runtime.cuda_graphs) whose capture fails at the first step takes that step again
    compiled without graphs (here a stand-in compile that runs the network as it is), and
    the run ends with the weights of an eager run."""
    eager = tmp_path / "eager"
    assert main(["run", str(write_spec(tmp_path / "a", tiny_data)), "--out", str(eager)]) == 0
    compiled: list[bool] = []

    def graph_compile(net, graphs=False):
        compiled.append(graphs)

        def capturing(*args, **kwargs):
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

        net._compiled_call_impl = capturing if graphs else net.forward

    configure = cpu.configure_cpu

    def with_graphs(*args, **kwargs):
        choice = configure(*args, **kwargs)
        return attrs.evolve(choice, graphs=True) if choice is not None else None

    monkeypatch.setattr(cpu.CPU, "compile", graph_compile)
    monkeypatch.setattr(cpu, "cpp_compiler", lambda: "/usr/bin/g++")
    monkeypatch.setattr(cpu.CPU, "position_major_mlp", lambda compiled: True)  # as above
    monkeypatch.setattr(cpu, "configure_cpu", with_graphs)
    spec = write_spec(tmp_path / "b", tiny_data)
    failed = tmp_path / "graphs"
    capsys.readouterr()
    code = main(["run", str(spec), "--out", str(failed), "--set", "runtime.compile=on"])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in err.splitlines() if "device graphs failed" in line]
    assert len(lines) == 1 and "capturing" in lines[0] and "without them" in lines[0]
    assert compiled == [True, False]
    assert [e["step"] for e in events(failed, "graphs_failed")] == [1]
    assert summary(failed)["final_weights_sha256"] == summary(eager)["final_weights_sha256"]


# 4. RNG: this device's state only, restored only on the same kind of device


class CountingDevice(DeviceBackend):
    name = "fakegpu"
    torch_type = "cpu"

    def __init__(self) -> None:
        self.restored: list[torch.Tensor] = []

    def rng_state(self, device):
        return torch.tensor([7, 7, 7], dtype=torch.uint8)

    def set_rng_state(self, state, device):
        self.restored.append(state)


def test_rng_holds_this_device_only_and_says_when_it_cannot_restore_it():
    backend = CountingDevice()
    state = capture_rng(backend, torch.device("cpu"))
    assert state["device"]["backend"] == "fakegpu" and state["device"]["state"].numel() == 3
    assert restore_rng(state, backend, torch.device("cpu")) is None
    assert len(backend.restored) == 1
    note = restore_rng(state, cpu.CPU, torch.device("cpu"))
    assert "fakegpu RNG state cannot be restored on cpu" in note
    legacy = {**state, "device": None, "cuda": [torch.zeros(3)] * 8}
    assert "old all-devices form" in restore_rng(legacy, backend, torch.device("cpu"))


def test_the_cuda_backend_saves_and_restores_the_rng_of_its_device_only(monkeypatch):
    seen: list[tuple[str, object]] = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda d: seen.append(("get", d)) or "s")
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, d: seen.append(("set", d)))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("all devices"))
    device = torch.device("cuda", 2)
    assert cuda.CUDA.rng_state(device) == "s"
    cuda.CUDA.set_rng_state("s", device)
    assert seen == [("get", device), ("set", device)]


# 6. the puzzle-embedding reduction: no atomics, no unique, the same on every rank


def test_sign_sgd_sums_per_id_without_atomics_or_data_dependent_shapes():
    generator = torch.Generator().manual_seed(0)
    ids = torch.tensor([4, 0, 4, 2, 0, 4, 9, 2])
    grads = torch.randn(8, 5, generator=generator)
    sums = summed_per_id(ids, grads)
    for i, row in enumerate(ids):
        expected = grads[ids == row].double().sum(0)
        assert torch.allclose(sums[i].double(), expected, atol=1e-6)
        assert torch.equal(sums[i], sums[(ids == row).nonzero()[0, 0]])  # duplicates agree
    assert sums.shape == grads.shape  # fixed by the batch, not by the number of ids
    ops = []

    class Ops(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Ops():
        summed_per_id(ids, grads)
    assert not [op for op in ops if "index_add" in op or "scatter" in op or "unique" in op]


def test_every_rank_applies_the_same_update_whatever_order_duplicates_arrive_in():
    """Ranks see the gathered lookups in rank order, so each computes the same sums; and a
    permuted arrival moves no sum by more than float32 rounding of its terms."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 3, (768,), generator=generator)  # Sudoku-like: few ids, many rows
    grads = torch.randn(768, 16, generator=generator)
    first, again = summed_per_id(ids, grads), summed_per_id(ids.clone(), grads.clone())
    assert torch.equal(first, again)
    order = torch.randperm(768, generator=generator)
    permuted = summed_per_id(ids[order], grads[order])
    scale = grads.abs().sum(0).max()
    assert (permuted - first[order]).abs().max() <= 1e-5 * scale


# 9. out of memory while flattening the gradients is this rank's OOM, not a dead peer


def test_out_of_memory_before_the_all_reduce_is_reported_as_out_of_memory(monkeypatch):
    monkeypatch.setattr(distributed, "active", lambda: True)

    def no_memory(tensors):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.2 GiB")

    monkeypatch.setattr(torch, "cat", no_memory)
    with pytest.raises(torch.OutOfMemoryError):
        distributed.all_reduce_sum_([torch.zeros(3)])


def test_nccl_reports_a_timeout_to_trm_instead_of_aborting(monkeypatch):
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    cuda.CUDA.prepare_process_group()
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    cuda.CUDA.prepare_process_group()  # the user's own choice wins
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_the_process_group_backend_comes_from_the_backends(monkeypatch):
    assert distributed.process_group_backend([cpu.CPU]) == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert distributed.process_group_backend([cpu.CPU, cuda.CUDA]) == "cpu:gloo,cuda:nccl"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.process_group_backend([cpu.CPU, cuda.CUDA]) == "gloo"


# 11. MPS: auto precision agrees with the tiers; the step's memory is a peak bound


def test_mps_auto_precision_agrees_with_the_tiers():
    from trm.memory import MemoryEstimate
    from trm.plugins.planning import tiers

    unified = MemoryEstimate(items=(), device_budget_bytes=16 * 2**30, unified_memory=True)
    assert tiers.native_bf16(HardwareProfile(), unified) is False
    assert mps.choose_mps_precision("auto", bf16_ok=True)[0] == "fp32"


def test_mps_step_memory_is_the_driver_allocation_which_bounds_the_peak(monkeypatch):
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 3 * 2**30, raising=False)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 2**30, raising=False)
    assert mps.MPS.step_peak_mb(torch.device("mps")) == 3072.0


def test_summary_records_the_backend(tiny_data, tmp_path):
    run = tmp_path / "run"
    assert main(["run", str(write_spec(tmp_path, tiny_data)), "--out", str(run)]) == 0
    assert json.loads((run / "summary.json").read_text())["backend"] == "cpu"
