"""trm bench and its parts: analytic FLOPs against torch's counter, the GEMM peak, the report."""

from __future__ import annotations

import json

import pytest
import torch
from attrs import evolve
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from trm.measure.flops import model_flops
from trm.measure.loop_timing import (
    NO_EVAL_SPLIT,
    LoopTiming,
    OtherLoad,
    bench_spec,
    small_data_spec,
)
from trm.model import ACTLoss, TinyRecursiveModel
from trm.plugin_manager import load_plugins
from trm.plugins.measure.peak import measure_gemm_peak
from trm.spec import ArchSpec, RunSpec, load_spec, resolve_spec_path

SEQ_LEN, VOCAB = 7, 6


def _batch(size: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "inputs": torch.randint(0, VOCAB, (size, SEQ_LEN), generator=gen),
        "labels": torch.randint(0, VOCAB, (size, SEQ_LEN), generator=gen),
        "puzzle_identifiers": torch.randint(0, 3, (size,), generator=gen),
    }


def _arch(mlp_t: bool, **overrides: object) -> ArchSpec:
    fields: dict[str, object] = dict(
        hidden_size=16,
        expansion=2.0,
        num_heads=2,
        L_layers=2,
        H_cycles=2,
        L_cycles=3,
        mlp_t=mlp_t,
        pos_encodings="none" if mlp_t else "rope",
        puzzle_emb_ndim=16,
        puzzle_emb_len=2,
        halt_max_steps=3,
    )
    fields.update(overrides)
    return ArchSpec(**fields)  # type: ignore[arg-type]


def _counted_training_step_flops(arch: ArchSpec, size: int, position_major: bool | None) -> int:
    torch.manual_seed(0)
    model = TinyRecursiveModel(arch, SEQ_LEN, VOCAB, 3, position_major=position_major).train()
    batch = _batch(size)
    with FlopCounterMode(display=False) as counter:
        carry, outputs = model(model.initial_carry(batch), batch)
        loss, _ = ACTLoss.compute(outputs, carry.current_data["labels"], carry.halted)
        loss.backward()
    return counter.get_total_flops()


@settings(max_examples=8, deadline=None)
@given(
    size=st.integers(1, 3),
    L_layers=st.integers(1, 2),
    H_cycles=st.integers(1, 3),
    L_cycles=st.integers(1, 3),
    no_ACT_continue=st.booleans(),
    position_major=st.sampled_from([None, False]),
)
def test_analytic_flops_equal_torchs_count_of_an_mlp_training_step(
    size: int,
    L_layers: int,
    H_cycles: int,
    L_cycles: int,
    no_ACT_continue: bool,
    position_major: bool | None,
) -> None:
    arch = _arch(
        True,
        L_layers=L_layers,
        H_cycles=H_cycles,
        L_cycles=L_cycles,
        no_ACT_continue=no_ACT_continue,
    )
    flops = model_flops(arch, SEQ_LEN, VOCAB)
    counted = _counted_training_step_flops(arch, size, position_major)
    # torch's counter sees the token-embedding lookup as no product; the analytic count
    # includes it as a one-hot product (forward once per pass, backward twice).
    uncounted = (flops.recursions + 2) * flops.embeddings
    assert counted == size * (flops.per_sample - uncounted)


def test_analytic_forward_flops_equal_torchs_count_with_attention() -> None:
    arch = _arch(False)
    flops = model_flops(arch, SEQ_LEN, VOCAB)
    model = TinyRecursiveModel(arch, SEQ_LEN, VOCAB, 3).eval()
    batch = _batch(2)
    # The math backend spells attention as batched products, which the counter sees.
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(model.initial_carry(batch), batch)
    assert counter.get_total_flops() == 2 * (flops.forward - flops.embeddings)


def test_paper_mlp_config_costs_about_43_gflop_per_sample() -> None:
    spec = load_spec(resolve_spec_path("sudoku-extreme-mlp"))
    flops = model_flops(spec.arch, 81, 11)
    # 21 calls of a 1.22 GFLOP network forward, 7 of them again twice backward.
    assert flops.forward_net_calls == 21 and flops.grad_net_calls == 7
    assert flops.per_sample == pytest.approx(42.72e9, rel=1e-3)


def test_gemm_peak_is_positive_and_rejects_unknown_precision() -> None:
    peak = measure_gemm_peak("cpu", "fp32", duration_s=0.05)
    assert peak.gflops > 0 and peak.size >= 512
    assert peak.gflops == max(peak.windows_gflops) and len(peak.windows_gflops) == 5
    with pytest.raises(ValueError, match="precision"):
        measure_gemm_peak("cpu", "int4", duration_s=0.05)


def test_loop_timing_rates_are_samples_over_seconds() -> None:
    timing = LoopTiming(batch_size=8, warmup_s=(9.0,), step_s=(1.0, 3.0))
    assert timing.samples_per_s == pytest.approx(16 / 4.0)
    assert timing.best_samples_per_s == pytest.approx(8.0)


def test_other_load_is_a_fraction() -> None:
    with OtherLoad() as load:
        sum(i * i for i in range(100_000))
    assert 0.0 <= load.fraction <= 1.0


def test_bench_spec_keeps_the_model_and_drops_evaluation() -> None:
    spec = load_spec(resolve_spec_path("sudoku-extreme-mlp"))
    bench = bench_spec(spec, batch_size=16, total_steps=5)
    assert bench.arch == spec.arch
    assert bench.train.global_batch_size == 16 and bench.train.max_steps == 5
    assert bench.train.eval_interval == 0 and bench.data.eval_split == NO_EVAL_SPLIT
    assert evolve(bench.train, global_batch_size=768, max_steps=0, eval_interval=5000) == evolve(
        spec.train, checkpoint_interval_steps=0
    )


def test_small_data_spec_cuts_only_the_sources_own_options() -> None:
    spec = load_spec(resolve_spec_path("sudoku-extreme-mlp"))
    small = small_data_spec(spec, load_plugins([]), rows=12)
    assert small.data.generate == {**spec.data.generate, "count": 12, "test_count": 1, "augment": 0}
    built = evolve(spec, data=evolve(spec.data, dir="/some/built/dir"))
    assert small_data_spec(built, load_plugins([]), rows=12) == built


def test_trm_bench_json_reports_consistent_figures(cli, tmp_path) -> None:
    result = cli(
        "bench",
        "quickstart",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--batch",
        "8",
        "--peak-seconds",
        "0.05",
        "--json",
    )
    assert result.code == 0, result.err
    report = json.loads(result.out)
    spec = load_spec(resolve_spec_path("quickstart"))
    assert report["flops_per_sample"] == model_flops(spec.arch, 16, 6).per_sample
    assert report["precision"] in ("fp32", "bf16")
    assert report["batch_size"] == 8 and len(report["step_s"]) == 2
    assert report["samples_per_s"] == pytest.approx(16 / sum(report["step_s"]))
    achieved = report["samples_per_s"] * report["flops_per_sample"] / 1e9
    assert report["achieved_gflops"] == pytest.approx(achieved)
    assert report["mfu"] == pytest.approx(report["achieved_gflops"] / report["peak_gflops"])
    ratio = report["samples_per_s"] / report["plain_samples_per_s"]
    assert report["speedup_vs_plain"] == pytest.approx(ratio)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-spec"], "no spec file"),
        (["quickstart", "--warmup", "0"], "--warmup"),
        (["quickstart", "--steps", "0"], "--steps"),
        (["quickstart", "--peak-seconds", "0"], "--peak-seconds"),
        (["quickstart", "--set", "arch.hidden_size=0"], "arch.hidden_size"),
    ],
)
def test_trm_bench_rejects_bad_input_with_one_line(cli, args, message) -> None:
    result = cli("bench", *args)
    assert result.code == 2
    lines = [line for line in result.err.splitlines() if line.startswith("trm: error:")]
    assert len(lines) == 1 and message in lines[0]


def test_run_spec_default_is_not_changed_by_bench() -> None:
    assert RunSpec().train.global_batch_size == 768
