"""CUDA graphs for the training step, tested on the CPU by what can be: the decision
(``runtime.cuda_graphs`` against whether the network compiles), the compile mode the cuda
backend asks torch for, the step mark each replay needs, the notice when torch declines a
capture, the graph pool in the memory estimate and the refusal where no backend replays
graphs. The fallback after a failed capture runs a real training loop in
tests/test_gpu_ready.py. What runs only on a GPU (the graphs themselves, their speed and
their pool's size) is benchmarks/device_graphs.sh, unrun in this suite."""

from __future__ import annotations

import importlib.util

import attrs
import pytest
import torch

from tests.conftest import assert_one_line_error
from tests.test_backends import fake_cuda
from trm.control import TrainControl
from trm.errors import TrmError
from trm.hardware import HardwareProfile
from trm.memory import StepMemory
from trm.plugins.backends import cuda, cuda_allocator
from trm.spec import RunSpec, RuntimeSpec, apply_overrides, load_spec, resolve_spec_path


@pytest.fixture(autouse=True)
def _fresh_backend_state():
    saved = (cuda.CUDA.graphs, cuda.CUDA.skips_at_compile, cuda.CUDA.skips_said)
    yield
    cuda.CUDA.graphs, cuda.CUDA.skips_at_compile, cuda.CUDA.skips_said = saved


def test_graphs_need_the_network_compiled() -> None:
    assert cuda.choose_cuda_graphs("off", True) == (False, None)
    assert cuda.choose_cuda_graphs("auto", False) == (False, None)
    on, note = cuda.choose_cuda_graphs("auto", True)
    assert on and "replayed as graphs" in note
    assert cuda.choose_cuda_graphs("on", True)[0]
    with pytest.raises(TrmError, match=r"runtime\.cuda_graphs = 'on' needs the network compiled"):
        cuda.choose_cuda_graphs("on", False)


def _cuda_spec(**runtime: str) -> RunSpec:
    return RunSpec(runtime=RuntimeSpec(**runtime))


def test_the_cuda_runtime_replays_graphs_where_it_compiles(monkeypatch) -> None:
    fake_cuda(monkeypatch, (9, 0))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(cuda, "c_compiler", lambda: "/usr/bin/gcc")
    monkeypatch.setattr(cuda, "python_headers", lambda: "/usr/include/python3.11")
    chosen = cuda.configure_runtime(_cuda_spec(), HardwareProfile(physical_cores=2))
    assert chosen.graphs and any("CUDA graphs" in note for note in chosen.notes)
    off = cuda.configure_runtime(_cuda_spec(cuda_graphs="off"), HardwareProfile())
    assert not off.graphs
    eager = cuda.configure_runtime(_cuda_spec(compile="off"), HardwareProfile())
    assert not eager.graphs
    with pytest.raises(TrmError, match="needs the network compiled"):
        cuda.configure_runtime(_cuda_spec(compile="off", cuda_graphs="on"), HardwareProfile())


class RecordingNet:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def compile(self, **kwargs) -> None:
        self.calls.append(kwargs)


def test_graphs_compile_in_reduce_overhead_mode_and_mark_each_step(monkeypatch) -> None:
    marks: list[int] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    net = RecordingNet()
    cuda.CUDA.compile(net, graphs=True)
    cuda.CUDA.begin_step(torch.device("cuda:0"))
    cuda.CUDA.compile(net)  # after a failed capture: compiled again, without graphs
    cuda.CUDA.begin_step(torch.device("cuda:0"))
    assert net.calls == [{"mode": "reduce-overhead"}, {}]
    assert marks == [1]


def test_a_declined_capture_is_said_once(monkeypatch) -> None:
    counts = iter([3, 3, 5, 6])
    monkeypatch.setattr(cuda, "cudagraph_skips", lambda: next(counts))
    cuda.CUDA.compile(RecordingNet(), graphs=True)  # reads 3
    control = TrainControl()
    cuda.on_step(state=None, metrics={}, control=control)  # 3: none declined
    assert control.take_messages() == []
    cuda.on_step(state=None, metrics={}, control=control)  # 5: two declined
    cuda.on_step(state=None, metrics={}, control=control)  # said already
    (line,) = control.take_messages()
    assert "declined to capture 2 compiled graph(s)" in line and "perf_hints" in line


def test_the_estimate_counts_the_graph_pool() -> None:
    step = StepMemory(
        activation_tensor_bytes=(1024,),
        activation_tensor_copies=2,
        reallocated_bytes=10 * 2**20,
        gradient_bytes=4096,
    )
    names = [item.name for item in cuda_allocator.allocator_items(step)]
    assert "CUDA graph pool" not in names
    graphs = attrs.evolve(step, graphs=True)
    (pool,) = [i for i in cuda_allocator.allocator_items(graphs) if i.name == "CUDA graph pool"]
    assert pool.bytes == 10 * 2**20 and pool.location == "device"


def test_graphs_asked_for_where_none_are_replayed_is_one_line(cli) -> None:
    assert_one_line_error(
        cli("estimate", "quickstart", "--set", "runtime.cuda_graphs=on"),
        "runtime.cuda_graphs = 'on'",
        "replays no CUDA graphs",
    )
    assert_one_line_error(
        cli("estimate", "quickstart", "--set", "runtime.cuda_graphs=maybe"),
        "runtime.cuda_graphs",
    )


def test_the_default_is_auto() -> None:
    spec = load_spec(resolve_spec_path("quickstart"))
    assert spec.runtime.cuda_graphs == "auto"
    assert apply_overrides(spec, ["runtime.cuda_graphs=off"]).runtime.cuda_graphs == "off"
