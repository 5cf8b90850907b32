"""Backend plugins (cpu, cuda, mps, mkl), their compile and precision choices, and the model's
speed paths (position-major layout, weights cast once per supervision step)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trm
from trm.device.compile import choose_compile, compile_network, is_compiled, planner_decides
from trm.errors import TrmError
from trm.hardware import HardwareProfile
from trm.model import ACTLoss, AdamATan2, TinyRecursiveModel, build_optimizers
from trm.model.optim import fused_adamw_supported
from trm.plugin_manager import load_plugins
from trm.plugins.backends import cpu, cuda, launch_env, mkl, mps
from trm.spec import ArchSpec, RunSpec, RuntimeSpec, TrainSpec

LARGE = ArchSpec()  # the paper's 512-wide network
SMALL = ArchSpec(hidden_size=64, num_heads=4)


def spec_with(arch: ArchSpec = LARGE, **runtime: object) -> RunSpec:
    return RunSpec(arch=arch, runtime=RuntimeSpec(**runtime))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _keep_threads_and_tf32():
    threads = torch.get_num_threads()
    tf32 = (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision)
    yield
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = tf32


# ------------------------------------------------------------------ compile decisions


def test_compile_auto_needs_a_large_network_and_a_compiler(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "cpp_compiler", lambda: "/usr/bin/g++")
    assert choose_compile("auto", cpu.CPU, large_network=True) == (True, None)
    # a small network: the planner decides from the run's steps (trm.plan.compile_choice)
    assert choose_compile("auto", cpu.CPU, large_network=False) == (False, None)
    assert planner_decides("auto", cpu.CPU, large_network=False)
    assert not planner_decides("auto", cpu.CPU, large_network=True)
    assert not planner_decides("on", cpu.CPU, large_network=False)
    assert choose_compile("off", cpu.CPU) == (False, None)
    monkeypatch.setattr(cpu, "cpp_compiler", lambda: None)
    on, note = choose_compile("auto", cpu.CPU)
    assert not on and note.startswith("running eager") and "C++ compiler" in note
    assert not planner_decides("auto", cpu.CPU, large_network=False)  # it cannot compile here
    with pytest.raises(TrmError, match=r"runtime\.compile = 'on'"):
        choose_compile("on", cpu.CPU)


def test_compile_on_mps_is_treated_as_unavailable() -> None:
    assert "experimental" in mps.MPS.compile_unavailable_reason()


def test_a_dropped_model_is_freed_at_once_without_the_cycle_collector() -> None:
    """The recursion region holds no reference back to its model: no reference cycle keeps a
    dropped model's memory until Python's cycle collector runs."""
    import gc
    import weakref

    model = TinyRecursiveModel(ArchSpec(hidden_size=16, num_heads=2, L_layers=1), 4, 5, 2)
    data = {
        "inputs": torch.randint(1, 5, (2, 4)),
        "labels": torch.randint(1, 5, (2, 4)),
        "puzzle_identifiers": torch.zeros(2, dtype=torch.long),
    }
    model(model.initial_carry(data), data)
    dropped = weakref.ref(model)
    gc.disable()
    try:
        del model
        assert dropped() is None
    finally:
        gc.enable()


def test_compiling_keeps_state_dict_keys_and_is_idempotent() -> None:
    """What is compiled is the recursion region, which holds no parameters and is no
    registered submodule: keys, parameters and modules are the same compiled or not."""
    model = TinyRecursiveModel(ArchSpec(hidden_size=16, num_heads=2, L_layers=1), 4, 5, 2)
    keys = list(model.state_dict())
    modules = [name for name, _ in model.named_modules()]
    compile_network(model, cpu.CPU)
    compiled_call = model.region._compiled_call_impl
    assert compiled_call is not None and list(model.state_dict()) == keys
    assert [name for name, _ in model.named_modules()] == modules
    assert list(model.region.parameters()) == [] and model.net._compiled_call_impl is None
    compile_network(model, cpu.CPU)
    assert model.region._compiled_call_impl is compiled_call and is_compiled(model)
    eager = TinyRecursiveModel(ArchSpec(hidden_size=16, num_heads=2, L_layers=1), 4, 5, 2)
    assert not is_compiled(eager)


def test_the_cpu_lays_the_mlp_variant_out_token_major_only_when_compiled() -> None:
    assert cpu.CPU.position_major_mlp(compiled=False)
    assert not cpu.CPU.position_major_mlp(compiled=True)
    # a device that measured nothing keeps the contract's default: position-major
    assert cuda.CUDA.position_major_mlp(compiled=True) and mps.MPS.position_major_mlp(False)


class _Layout:
    """An in-process plugin: the layout of the network a run trains."""

    def __init__(self) -> None:
        self.position_major: list[bool] = []

    @trm.hookimpl
    def on_step(self, state) -> None:
        self.position_major.append(state.model.net.position_major)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_run_builds_the_layout_its_backend_prefers(compiled, tmp_path, monkeypatch) -> None:
    from tests.tiny_run import build_tiny_data, write_spec
    from trm.loop import setup

    # the decision is taken before compiling; compiling itself is not what is tested here
    monkeypatch.setattr(setup, "compile_network", lambda *args, **kwargs: None)
    spec = write_spec(tmp_path, build_tiny_data(tmp_path / "data"), max_steps=1)
    seen = _Layout()
    overrides = [f"runtime.compile={'on' if compiled else 'off'}"]
    trm.train(spec, out=tmp_path / "run", overrides=overrides, plugins=[seen, "no:progress"])
    assert seen.position_major == [not compiled]


def test_the_attention_variant_ignores_the_layout() -> None:
    from trm.data.shape import DatasetShape
    from trm.model import build_model

    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    attention = build_model(ArchSpec(hidden_size=16, num_heads=2, mlp_t=False), shape, True)
    assert not attention.net.position_major
    mlp = build_model(ArchSpec(hidden_size=16, num_heads=2, mlp_t=True), shape, False)
    assert not mlp.net.position_major


# ------------------------------------------------------------------ cpu


@pytest.mark.parametrize(
    ("setting", "native", "expected"),
    [
        ("auto", True, "bf16"),
        ("auto", False, "fp32"),
        ("auto", None, "fp32"),
        ("fp16", True, "bf16"),
        ("fp32", True, "fp32"),
        ("bf16", False, "bf16"),
    ],
)
def test_cpu_precision_choice(setting, native, expected) -> None:
    precision, notes = cpu.choose_cpu_precision(setting, native)
    assert precision == expected
    if setting == "bf16" and not native:
        assert any("emulated" in n for n in notes)


def test_cpu_auto_precision_is_bf16_for_a_small_network_where_bf16_is_native(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "allowed_cpu_count", lambda: 2)
    native = HardwareProfile(physical_cores=1, logical_cores=2, cpu_native_bf16=True)
    plain = HardwareProfile(physical_cores=1, logical_cores=2, cpu_native_bf16=False)
    assert cpu.configure_cpu(spec_with(SMALL), native).precision == "bf16"
    assert cpu.configure_cpu(spec_with(SMALL), plain).precision == "fp32"
    assert cpu.configure_cpu(spec_with(SMALL, precision="fp32"), native).precision == "fp32"


def test_cpu_backend_uses_physical_cores_and_answers_only_for_cpu(monkeypatch) -> None:
    monkeypatch.setattr(cpu, "cpp_compiler", lambda: "/usr/bin/g++")
    # The profile's two logical CPUs, whatever this process's own mask is (pytest -n pins).
    monkeypatch.setattr(cpu, "allowed_cpu_count", lambda: 2)
    hardware = HardwareProfile(physical_cores=1, logical_cores=2, cpu_native_bf16=True)
    choice = cpu.configure_cpu(spec_with(), hardware)
    assert choice.device == "cpu" and choice.threads == 1 and torch.get_num_threads() == 1
    assert choice.precision == "bf16" and choice.compile
    small = cpu.configure_cpu(spec_with(SMALL), hardware)
    assert small.precision == "bf16" and not small.compile
    assert cpu.configure_cpu(spec_with(device="cuda"), hardware) is None
    assert cpu.configure_cpu(spec_with(threads=2), hardware).threads == 2


# ------------------------------------------------------------------ cuda (no GPU needed)


class FakeProps:
    def __init__(self, major: int, minor: int, name: str = "Fake GPU") -> None:
        self.major, self.minor, self.name = major, minor, name
        self.total_memory = 16 * 2**30


def fake_cuda(monkeypatch, capability: tuple[int, int], count: int = 2) -> list[int]:
    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: FakeProps(*capability))
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: (8 * 2**30, 16 * 2**30))
    return chosen


def test_cuda_plugin_is_off_and_silent_without_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not cuda.is_available()
    assert cuda.detect_hardware() is None
    assert cuda.configure_runtime(spec_with(), HardwareProfile()) is None


def test_cuda_on_ampere_uses_bf16_tf32_and_the_local_rank(monkeypatch) -> None:
    chosen = fake_cuda(monkeypatch, (8, 0))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    choice = cuda.configure_runtime(spec_with(), HardwareProfile(physical_cores=4))
    assert choice.device == "cuda:1" and chosen == [1]
    assert choice.precision == "bf16" and choice.compile and choice.threads == 4
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    assert any("TF32" in n for n in choice.notes)
    profile = cuda.detect_hardware()
    gpus = profile.accelerators
    assert cuda.CUDA.budget_bytes(profile, torch.device("cuda:1")) == 16 * 2**30
    assert len(gpus) == 2
    gpu = gpus[0]
    assert (gpu.generation, gpu.bf16, gpu.fp16, gpu.tf32) == ("sm_80", True, True, True)
    assert "sm_80" in gpu.describe()


def test_cuda_before_ampere_trains_fp32_without_tf32(monkeypatch) -> None:
    fake_cuda(monkeypatch, (7, 0))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    choice = cuda.configure_runtime(spec_with(), HardwareProfile())
    assert choice.device == "cuda:0" and choice.precision == "fp32"
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert not choice.compile and any("Triton" in n for n in choice.notes)
    assert cuda.configure_runtime(spec_with(device="cpu"), HardwareProfile()) is None
    fp16, notes = cuda.choose_cuda_precision("fp16", cuda.cuda_gpu(0))
    assert fp16 == "fp16" and any("loss scaling" in n for n in notes)


# ------------------------------------------------------------------ mps (no Apple GPU needed)


def test_mps_precision_choice() -> None:
    assert mps.choose_mps_precision("auto", True)[0] == "fp32"  # as the tiers decide
    assert mps.choose_mps_precision("auto", False)[0] == "fp32"
    precision, notes = mps.choose_mps_precision("bf16", False)
    assert precision == "fp32" and "macOS 14" in notes[0]


def test_mps_backend_asks_for_the_cpu_fallback_and_runs_eager(monkeypatch) -> None:
    monkeypatch.setattr(mps, "is_available", lambda: True)
    monkeypatch.setattr(mps, "mps_supports_bf16", lambda: True)
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    choice = mps.configure_runtime(spec_with(), HardwareProfile(physical_cores=2))
    assert choice.device == "mps" and choice.precision == "fp32" and not choice.compile
    assert any("PYTORCH_ENABLE_MPS_FALLBACK=1" in n for n in choice.notes)
    monkeypatch.setattr(mps, "is_available", lambda: False)
    assert mps.configure_runtime(spec_with(), HardwareProfile()) is None


# ------------------------------------------------------------------ mkl and the environment


MKL_CONFIG = """PyTorch built with:
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71)
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl,"""
MAC_CONFIG = """PyTorch built with:
  - Build settings: BLAS_INFO=accelerate, BUILD_TYPE=Release, LAPACK_INFO=accelerate,"""


def test_blas_report_reads_the_torch_build_configuration() -> None:
    report = mkl.blas_report(MKL_CONFIG)
    assert (report.blas, report.mkl_version, report.onednn_version) == ("mkl", "2024.2", "3.12.0")
    mac = mkl.blas_report(MAC_CONFIG)
    assert mac.blas == "accelerate" and mac.mkl_version is None
    assert mkl.blas_report("nothing here").blas == "unknown"
    assert mkl.expected_blas("Darwin", "arm64") == "accelerate"
    assert mkl.expected_blas("Linux", "x86_64") == "mkl"
    assert mkl.expected_blas("Linux", "aarch64") is None


def test_thread_env_per_library() -> None:
    assert mkl.thread_env(4, "mkl") == {
        "OMP_NUM_THREADS": "4",
        "MKL_NUM_THREADS": "4",
        "MKL_DYNAMIC": "FALSE",
    }
    assert mkl.thread_env(8, "accelerate") == {
        "OMP_NUM_THREADS": "8",
        "VECLIB_MAXIMUM_THREADS": "8",
    }


def test_ensure_env_never_overrides_and_relaunches_only_the_command(monkeypatch) -> None:
    monkeypatch.setenv("TRM_TEST_A", "mine")
    monkeypatch.delenv("TRM_TEST_B", raising=False)
    wanted = {"TRM_TEST_A": "1", "TRM_TEST_B": "2"}
    assert launch_env.missing_env(wanted) == {"TRM_TEST_B": "2"}
    notes = launch_env.ensure_env(wanted, "who", "why")  # pytest is not the trm command
    assert "export TRM_TEST_B=2" in notes[0]
    calls: list[tuple] = []
    monkeypatch.setattr(launch_env, "launched_as_command", lambda: True)
    monkeypatch.setattr(launch_env.os, "execve", lambda *a: calls.append(a))
    monkeypatch.delenv(launch_env.RELAUNCH_MARK, raising=False)
    monkeypatch.delenv(launch_env.NO_RELAUNCH, raising=False)
    launch_env.ensure_env(wanted, "who", "why")
    ((_program, argv, env),) = calls
    assert argv[1:3] == ["-m", "trm"] and env["TRM_TEST_B"] == "2"
    assert env["TRM_TEST_A"] == "mine" and env[launch_env.RELAUNCH_MARK] == "TRM_TEST_B"
    monkeypatch.setenv(launch_env.RELAUNCH_MARK, "OTHER,TRM_TEST_B")  # never twice
    assert "export" in launch_env.ensure_env(wanted, "who", "why")[0]
    monkeypatch.setenv("TRM_TEST_B", "2")
    assert launch_env.ensure_env(wanted, "who", "why") == [
        "who: TRM_TEST_A=mine TRM_TEST_B=2 (why)"
    ]


def test_mkl_plugin_wraps_the_cpu_choice_and_reports_what_it_did(monkeypatch) -> None:
    monkeypatch.setattr(launch_env, "launched_as_command", lambda: False)
    for name in mkl.thread_env(1, "mkl").keys() | {"VECLIB_MAXIMUM_THREADS"}:
        monkeypatch.delenv(name, raising=False)
    pm = load_plugins(["mkl"])
    info = {i.name: i for i in pm.infos}
    assert info["mkl"].enabled and info["mkl"].activation == "opt-in"
    choice = pm.hook.configure_runtime(spec=spec_with(device="cpu"), hardware=HardwareProfile())
    assert choice.device == "cpu"
    mkl_notes = [n for n in choice.notes if n.startswith("mkl:")]
    assert mkl_notes, choice.notes
    if mkl.expected_blas() == "mkl" and mkl.blas_report().blas == "mkl":
        assert any("MKL_NUM_THREADS" in n for n in mkl_notes)


def test_backends_are_registered_with_their_activation() -> None:
    infos = {i.name: i for i in load_plugins([]).infos}
    assert infos["mkl"].activation == "opt-in" and not infos["mkl"].enabled
    assert infos["cuda"].activation == "auto" and infos["mps"].activation == "auto"
    assert infos["cuda"].enabled == torch.cuda.is_available()
    assert infos["cpu"].enabled


# ------------------------------------------------------------------ the model's speed paths


def _pair(arch: ArchSpec, seed: int) -> tuple[TinyRecursiveModel, TinyRecursiveModel]:
    torch.manual_seed(seed)
    fast = TinyRecursiveModel(arch, 5, 6, 3)
    reference = TinyRecursiveModel(arch, 5, 6, 3, position_major=False)
    reference.load_state_dict(fast.state_dict())
    with torch.no_grad():
        fast.puzzle_emb.weights.normal_()
        reference.puzzle_emb.weights.copy_(fast.puzzle_emb.weights)
    return fast, reference


@settings(max_examples=6, deadline=None)
@given(
    hidden=st.sampled_from([8, 16]),
    layers=st.integers(1, 2),
    h_cycles=st.integers(1, 3),
    batch=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_position_major_mlp_variant_equals_the_reference_formulation(
    hidden: int, layers: int, h_cycles: int, batch: int, seed: int
) -> None:
    arch = ArchSpec(
        hidden_size=hidden,
        expansion=2.0,
        num_heads=2,
        L_layers=layers,
        H_cycles=h_cycles,
        L_cycles=2,
        mlp_t=True,
        pos_encodings="none",
        puzzle_emb_ndim=hidden,
        puzzle_emb_len=2,
    )
    fast, reference = (m.double() for m in _pair(arch, seed))  # float64 (norms stay float32)
    assert fast.net.position_major and not reference.net.position_major
    gen = torch.Generator().manual_seed(seed)
    data = {
        "inputs": torch.randint(0, 6, (batch, 5), generator=gen),
        "labels": torch.randint(0, 6, (batch, 5), generator=gen),
        "puzzle_identifiers": torch.randint(0, 3, (batch,), generator=gen),
    }
    results = []
    for model in (fast, reference):
        carry, out = model(model.initial_carry(data), data)
        loss, _ = ACTLoss.compute(out, carry.current_data["labels"], carry.halted)
        loss.backward()
        results.append((carry, out, {n: p.grad for n, p in model.named_parameters()}))
    (c1, o1, g1), (c2, o2, g2) = results
    assert_close_at_scale(o1["logits"], o2["logits"], "logits")
    assert_close_at_scale(c1.z_H, c2.z_H, "z_H")
    assert c1.z_H.shape == (batch, 7, hidden) and c1.z_H.is_contiguous()
    for name in g1:
        assert_close_at_scale(g1[name], g2[name], name)


def assert_close_at_scale(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal up to rounding relative to the tensor's largest entry (sums in another order move
    near-zero entries by more than their own size; the RMS norms round to float32)."""
    scale = float(expected.detach().abs().max())
    error = float((actual - expected).detach().abs().max())
    assert error <= 1e-5 * scale + 1e-9, f"{what}: off by {error:.3g} at scale {scale:.3g}"


def test_position_major_needs_the_mlp_variant() -> None:
    with pytest.raises(ValueError, match="mlp_t"):
        TinyRecursiveModel(ArchSpec(hidden_size=16, num_heads=2), 4, 5, 2, position_major=True)


def test_under_autocast_the_network_sees_weights_cast_once_per_step() -> None:
    arch = ArchSpec(hidden_size=16, num_heads=2, L_layers=1, H_cycles=2, L_cycles=2)
    model = TinyRecursiveModel(arch, 4, 5, 2)
    seen: list[tuple[torch.dtype, int]] = []
    gate_up = model.net.layers[0].mlp.gate_up
    gate_up.register_forward_pre_hook(
        lambda module, _args: seen.append((module.weight.dtype, id(module.weight)))
    )
    batch = {
        "inputs": torch.randint(0, 5, (2, 4)),
        "labels": torch.randint(0, 5, (2, 4)),
        "puzzle_identifiers": torch.zeros(2, dtype=torch.long),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        carry, out = model(model.initial_carry(batch), batch)
        loss, _ = ACTLoss.compute(out, carry.current_data["labels"], carry.halted)
    loss.backward()
    calls = arch.H_cycles * (arch.L_cycles + 1)
    if model.activation_checkpointing:  # backward runs the grad-carrying calls again
        calls += arch.L_cycles + 1
    assert len(seen) == calls and {dtype for dtype, _ in seen} == {torch.bfloat16}
    assert len({ident for _, ident in seen}) == 1  # one cast copy shared by every call
    assert gate_up.weight.dtype == torch.float32 and gate_up.weight.grad.dtype == torch.float32
    seen.clear()
    model(model.initial_carry(batch), batch)  # without autocast: the float32 weights
    assert {dtype for dtype, _ in seen} == {torch.float32}


# ------------------------------------------------------------------ optimizer steps


def test_adam_atan2_multi_tensor_step_follows_the_formula_per_parameter() -> None:
    torch.manual_seed(5)
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    opt = AdamATan2(params, lr=0.05, betas=(0.8, 0.9), weight_decay=0.2)
    reference = [p.detach().double().clone() for p in params]
    moments = [(torch.zeros_like(r), torch.zeros_like(r), 0) for r in reference]
    for step in range(4):
        grads = [torch.randn_like(p) for p in params]
        skip = step == 2  # the second parameter gets no gradient this step: its t lags
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            p.grad = None if (skip and i == 1) else g
        opt.step()
        for i, g in enumerate(grads):
            if skip and i == 1:
                continue
            m, v, t = moments[i]
            t += 1
            g64 = g.double()
            m = 0.8 * m + 0.2 * g64
            v = 0.9 * v + 0.1 * g64 * g64
            r = reference[i] * (1 - 0.05 * 0.2)
            r = r - 0.05 / (1 - 0.8**t) * torch.atan2(m, (v / (1 - 0.9**t)).sqrt())
            reference[i], moments[i] = r, (m, v, t)
    for p, r in zip(params, reference, strict=True):
        torch.testing.assert_close(p.detach().double(), r, rtol=1e-5, atol=1e-6)


def test_adamw_is_fused_on_cpu_and_cuda_parameters() -> None:
    assert fused_adamw_supported([torch.zeros(2), torch.zeros(3)])
    assert not fused_adamw_supported([])
    assert not fused_adamw_supported([torch.zeros(2, dtype=torch.float64)])
    model = TinyRecursiveModel(ArchSpec(hidden_size=16, num_heads=2, L_layers=1), 4, 5, 2)
    dense = build_optimizers(model, TrainSpec(optimizer="adamw"))[-1]
    assert dense.defaults["fused"] is True
