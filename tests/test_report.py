"""`trm report`: plots, index.html and the summary from real runs; the leak and slowdown
detectors on injected faults (the faults plugin's ``leak`` and ``slow``), on a clean run,
and on synthetic rows; the richer metrics rows they read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from tests.conftest import assert_one_line_error
from tests.tiny_run import build_tiny_data, metrics, summary, write_spec
from trm.cli.main import main
from trm.device.contract import host_placement
from trm.evaluation.evaluate import add_halting_sums, halting_metrics, run_all_steps
from trm.model import TinyRecursiveModel
from trm.plugins.report.detect import (
    LEAK_MB_PER_1K_STEPS,
    detect,
    detect_leak,
    detect_slowdown,
)
from trm.spec import load_spec

STEPS = 30
# Every step of these runs waits STEP_FLOOR_MS more (the faults plugin's ``slow``), so the
# speed a test judges is set by the sleep, not by what else the shared test machine runs.
STEP_FLOOR_MS = 250
SLOW_FROM_STEP, SLOW_EXTRA_MS = 20, 750
LEAK_FROM_STEP, LEAK_MB_PER_STEP = 8, 4


def _train(spec: Path, out: Path, faults: str, *extra: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRM_FAULTS", faults)
        args = ["run", str(spec), "--out", str(out), "--plugins", "faults", *extra]
        assert main(args) == 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> SimpleNamespace:
    """A clean run and one slowed from SLOW_FROM_STEP (with another learning rate)."""
    base = tmp_path_factory.mktemp("report")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, max_steps=STEPS, checkpoint_interval_steps=10, eval_interval=10)
    floor = f"slow@1:{STEP_FLOOR_MS}"
    _train(spec, base / "clean", floor)
    slowed = f"{floor},slow@{SLOW_FROM_STEP}:{SLOW_EXTRA_MS}"
    _train(spec, base / "slow", slowed, "--set", "train.lr=0.002")
    return SimpleNamespace(base=base, data=data, spec=spec)


def _report(cli, out: Path, *run_dirs: Path) -> dict:
    result = cli("report", *run_dirs, "--out", out, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


# ------------------------------------------------------------------ plots and page


def _expected_series(run_dir: Path) -> dict[str, dict[str, dict[str, int]]]:
    """Per PNG, per panel: every series label and its number of points, from the rows."""
    rows = metrics(run_dir)
    train = [r for r in rows if "kind" not in r]
    evals = [r for r in rows if r.get("kind") == "eval"]
    checkpoints = [r for r in rows if r.get("event") == "checkpoint"]
    n, n_eval = len(train), len(evals)
    halted = sum(1 for r in train if r["halted"] > 0)
    accuracy = {
        "exact accuracy": {"train exact": halted, "eval exact": n_eval},
        "cell accuracy": {"train cell": halted, "eval cell": n_eval},
    }
    return {
        "loss.png": {
            "loss": {"train loss": n, "eval loss": n_eval},
            "learning rate": {"learning rate": n},
        },
        "accuracy_by_samples.png": accuracy,
        "accuracy_by_time.png": accuracy,
        "throughput.png": {"samples/s": {"samples/s": n}, "data wait": {"data wait": n}},
        "memory.png": {"host memory (resident)": {"host memory": n, "host estimate": 2}},
        "halting.png": {
            "mean halting steps": {"train": halted, "eval (first step the Q head halts)": n_eval},
            "q-halt accuracy": {"train": halted, "eval": n_eval},
        },
        "events.png": {
            "samples/s": {"samples/s": n},
            "events": {"checkpoint": len(checkpoints)},
        },
    }


@pytest.mark.slow
def test_the_memory_plot_shows_the_estimates_promised_band(runs, cli, tmp_path):
    """The ±10% band around the host estimate is drawn, and the axis holds all of it, so
    a gap of a few percent between estimate and measurement looks as small as it is."""
    clean = runs.base / "clean"
    _report(cli, tmp_path / "out", clean)
    manifest = json.loads((tmp_path / "out" / "plots.json").read_text())
    (memory,) = [entry for entry in manifest if entry["file"] == "memory.png"]
    panel = memory["panels"][0]
    estimate_mb = json.loads((clean / "estimate.json").read_text())["host_total_bytes"] / 2**20
    (band,) = panel["bands"]
    assert band["label"] == "host estimate"
    assert band["low"] == pytest.approx(0.9 * estimate_mb)
    assert band["high"] == pytest.approx(1.1 * estimate_mb)
    low, high = panel["y_range"]
    assert low <= band["low"] and band["high"] <= high


def _pixels_of(image: np.ndarray, color: str, box: list[float]) -> int:
    """Pixels within ``box`` (x0, y0, x1, y1 from the top left) close to ``color``."""
    x0, y0, x1, y1 = (round(v) for v in box)
    region = image[y0:y1, x0:x1, :3].astype(int)
    rgb = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(region - rgb).max(axis=-1) <= 40).sum())


@pytest.mark.slow
def test_a_report_of_a_real_run_draws_one_line_per_series_in_every_png(runs, cli, tmp_path):
    clean = runs.base / "clean"
    document = _report(cli, tmp_path / "out", clean)
    manifest = json.loads((tmp_path / "out" / "plots.json").read_text())
    expected = _expected_series(clean)
    assert document["plots"] == list(expected)
    for entry in manifest:
        image = (imread(tmp_path / "out" / entry["file"])[..., :3] * 255).astype(np.uint8)
        colours = np.unique(image.reshape(-1, 3), axis=0)
        assert len(colours) > 20, entry["file"]  # decoded and not blank
        assert (image.min(axis=-1) < 200).mean() > 0.01, entry["file"]
        panels = {panel["title"]: panel for panel in entry["panels"]}
        assert set(panels) == set(expected[entry["file"]]), entry["file"]
        for title, series in expected[entry["file"]].items():
            lines = panels[title]["lines"]
            assert {line["label"]: line["points"] for line in lines} == series, (
                entry["file"],
                title,
            )
            assert len({line["color"] for line in lines}) == len(lines)
            for line in lines:  # each series is drawn where the panel is, not only in its legend
                drawn = _pixels_of(image, line["color"], panels[title]["box_px"])
                assert drawn >= 100, (entry["file"], title, line["label"], drawn)


def test_index_html_shows_every_png_and_fetches_nothing(runs, cli, tmp_path):
    document = _report(cli, tmp_path / "out", runs.base / "clean")
    page = (tmp_path / "out" / "index.html").read_text()
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert sources == document["plots"]
    assert all((tmp_path / "out" / name).is_file() for name in sources)
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert not re.search(r'(src|href)="//', page)
    assert "best exact" in page and "peak host MB" in page


def test_two_runs_overlay_with_a_legend_and_the_differing_spec_keys(runs, cli, tmp_path):
    clean, slow = runs.base / "clean", runs.base / "slow"
    document = _report(cli, tmp_path / "out", clean, slow)
    assert [d["key"] for d in document["spec_differences"]] == ["train.lr"]
    assert document["spec_differences"][0]["values"] == [0.001, 0.002]
    assert [r["run"] for r in document["runs"]] == ["clean", "slow"]
    manifest = {e["file"]: e for e in json.loads((tmp_path / "out" / "plots.json").read_text())}
    loss = manifest["loss.png"]["panels"][0]["lines"]
    assert sorted(line["label"] for line in loss) == [
        "clean: eval loss",
        "clean: train loss",
        "slow: eval loss",
        "slow: train loss",
    ]
    page = (tmp_path / "out" / "index.html").read_text()
    assert "Spec keys that differ" in page and "train.lr" in page


def test_a_folder_without_a_run_is_one_line(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_error(cli("report", tmp_path / "empty"), "metrics.jsonl")
    assert_one_line_error(cli("report", tmp_path / "missing"), "not a directory")


# ------------------------------------------------------------------ detection on real runs


def test_a_clean_run_is_not_flagged(runs, cli, tmp_path):
    assert summary(runs.base / "clean")["findings"] == []
    document = _report(cli, tmp_path / "out", runs.base / "clean")
    assert document["runs"][0]["findings"] == []


def test_an_injected_slowdown_is_flagged_with_the_step_it_began(runs, cli, tmp_path):
    found = summary(runs.base / "slow")["findings"]
    assert [f["kind"] for f in found] == ["slowdown"]
    assert SLOW_FROM_STEP <= found[0]["step"] <= SLOW_FROM_STEP + 2
    assert found[0]["drop_fraction"] > 0.5
    assert "check top" in found[0]["suggestion"]
    document = _report(cli, tmp_path / "out", runs.base / "slow")
    assert [f["kind"] for f in document["runs"][0]["findings"]] == ["slowdown"]


def test_an_injected_leak_is_flagged_at_the_end_of_the_run_and_in_the_report(runs, cli, tmp_path):
    run_dir = tmp_path / "leak"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRM_FAULTS", f"leak@{LEAK_FROM_STEP}:{LEAK_MB_PER_STEP}")
        result = cli("run", runs.spec, "--out", run_dir, "--plugins", "faults")
    assert result.code == 0, result.err
    assert "warning: host memory grows steadily" in result.err
    leaks = [f for f in summary(run_dir)["findings"] if f["kind"] == "leak"]
    assert len(leaks) == 1
    assert LEAK_FROM_STEP - 1 <= leaks[0]["step"] <= LEAK_FROM_STEP + 1
    # 4 MB a step: about 4,000 MB per 1,000 steps (resident memory rounds a little)
    assert 3000 < leaks[0]["growth_mb_per_1k_steps"] < 5000
    document = _report(cli, tmp_path / "out", run_dir)
    assert "leak" in [f["kind"] for f in document["runs"][0]["findings"]]
    assert "leak from step" in (tmp_path / "out" / "index.html").read_text()


# ------------------------------------------------------------------ the detectors' rules


def _rows(mem_mb, rate) -> list[dict]:
    steps = range(1, len(mem_mb) + 1)
    return [
        {"step": s, "samples": 8 * s, "samples_per_s": r, "mem_host_mb": m}
        for s, m, r in zip(steps, mem_mb, rate, strict=True)
    ]


def _noise(count: int, scale: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, scale, count)


def test_growth_below_the_threshold_or_that_stops_is_not_a_leak():
    steps = np.arange(1, 2001)
    slow_growth = 500 + steps * (LEAK_MB_PER_1K_STEPS / 1000) * 0.5 + _noise(2000, 0.5)
    assert detect_leak(_rows(slow_growth, [100.0] * 2000)) is None
    warm_up = 500 + np.minimum(steps, 300) * 0.5 + _noise(2000, 0.5)  # +150 MB, then flat
    assert detect_leak(_rows(warm_up, [100.0] * 2000)) is None
    one_jump = 500 + (steps > 1000) * 200.0  # a 200 MB step up, once
    assert detect_leak(_rows(one_jump, [100.0] * 2000)) is None


def test_steady_growth_is_a_leak_from_the_step_it_began_also_in_a_long_run():
    steps = np.arange(1, 50_001)
    memory = 800 + np.maximum(0, steps - 12_000) * 0.002 + _noise(50_000, 1.0)  # 2 MB / 1k
    assert detect_leak(_rows(memory, [100.0] * 50_000)) is None  # below the threshold
    memory = 800 + np.maximum(0, steps - 12_000) * 0.2 + _noise(50_000, 1.0)
    leak = detect_leak(_rows(memory, [100.0] * 50_000))
    assert leak is not None and abs(leak.step - 12_000) < 300
    assert leak.figures["growth_mb_per_1k_steps"] == pytest.approx(200, rel=0.05)


def test_speed_noise_and_short_dips_are_not_a_slowdown_but_a_lasting_drop_is():
    rng = np.random.default_rng(1)
    rate = 100 + rng.normal(0, 5, 400)
    rate[::37] = 20  # single slow steps (checkpoints, another program's burst)
    assert detect_slowdown(_rows([500.0] * 400, rate)) is None
    gentle = rate * np.where(np.arange(400) >= 200, 0.85, 1.0)  # 15% slower: within bounds
    assert detect_slowdown(_rows([500.0] * 400, gentle)) is None
    dropped = rate * np.where(np.arange(400) >= 250, 0.6, 1.0)
    slowdown = detect_slowdown(_rows([500.0] * 400, dropped))
    assert slowdown is not None and 249 <= slowdown.step <= 253
    assert "to the end of the run" in slowdown.message


def test_a_slowdown_names_a_cause_the_run_recorded():
    rate = np.where(np.arange(100) >= 60, 40.0, 100.0)
    rows = _rows([500.0] * 100, rate)
    rows.append({"kind": "event", "step": 59, "event": "thermal", "level": "hot"})
    (finding,) = detect(rows)
    assert "thermal plugin reported hot at step 59" in finding.suggestion
    rows[-1] = {"kind": "event", "step": 59, "event": "micro_batch", "old": 64, "new": 16}
    (finding,) = detect(rows)
    assert "micro-batch fell from 64 to 16" in finding.suggestion


# a staged curriculum's 1,000 steps at sudoku9-laptop's measured step times (128 samples a
# step at 0.19 / 0.27 / 0.48 s): samples/s falls 60% from (1, 1) to (2, 3), the work does not
CURRICULUM = (
    [((1, 1), 128 / 0.19)] * 300 + [((1, 2), 128 / 0.27)] * 300 + [((2, 3), 128 / 0.48)] * 400
)


def _depth_rows(stages, slower_from: int | None = None) -> list[dict]:
    rng = np.random.default_rng(2)
    rows = []
    for step, ((H_cycles, L_cycles), rate) in enumerate(stages, start=1):
        rate *= 1 + rng.normal(0, 0.03)
        if slower_from is not None and step >= slower_from:
            rate *= 0.5
        rows.append(
            {"step": step, "samples": 128 * step, "samples_per_s": rate, "mem_host_mb": 500.0}
            | {"H_cycles": H_cycles, "L_cycles": L_cycles, "halt_exploration_prob": 0.1}
        )
    return rows


def test_a_curriculum_deepening_the_recursion_is_not_a_slowdown():
    rows = _depth_rows(CURRICULUM)
    deep = [r["samples_per_s"] for r in rows[700:]]
    assert np.median(deep) < 0.45 * np.median([r["samples_per_s"] for r in rows[50:300]])
    rows.append({"kind": "event", "step": 300, "event": "recursion", "H_cycles": 1, "L_cycles": 2})
    assert detect(rows) == []


def test_a_drop_at_one_depth_is_still_a_slowdown_in_samples_per_s():
    (finding,) = detect(_depth_rows([((2, 3), 267.0)] * 1000, slower_from=600))
    assert 598 <= finding.step <= 603
    assert finding.message.startswith("samples/s fell 50% below its early median from step")
    assert finding.figures["early_samples_per_s"] == pytest.approx(267, rel=0.03)


def test_a_real_drop_during_a_curriculum_is_a_slowdown_in_work_per_second():
    (finding,) = detect(_depth_rows(CURRICULUM, slower_from=800))
    assert 798 <= finding.step <= 803
    assert finding.message.startswith("work per second (samples/s weighted by each step")
    # half the speed; the work model's (2, 3) is 2.67 × (1, 1), the step times' 2.53
    assert finding.figures["drop_fraction"] == pytest.approx(0.5, abs=0.05)
    assert "samples/s at depth (1, 1); flagged beyond 20%" in finding.message
    assert finding.figures["early_samples_per_s"] == pytest.approx(128 / 0.19, rel=0.03)
    assert (finding.figures["reference_H_cycles"], finding.figures["reference_L_cycles"]) == (1, 1)
    assert "nothing in the run's records explains it" in finding.suggestion


def test_the_work_of_a_depth_is_the_flops_models_network_calls():
    from trm.measure.flops import model_flops
    from trm.recursion import net_calls_per_sample
    from trm.spec import ArchSpec

    for H_cycles, L_cycles in [(1, 1), (1, 2), (2, 3), (3, 6)]:
        arch = ArchSpec(H_cycles=H_cycles, L_cycles=L_cycles)
        flops = model_flops(arch, 81, 11)
        # the FLOPs model's network part: the forward calls, and backward (2x) of those with grad
        network = (flops.net_calls + 2 * flops.grad_net_calls) * flops.net_call
        assert network == net_calls_per_sample(H_cycles, L_cycles) * flops.net_call


def test_too_few_rows_are_not_judged():
    assert detect(_rows([500.0 + 10 * s for s in range(10)], [100.0] * 10)) == []


# ------------------------------------------------------------------ richer metrics rows


def test_training_and_eval_rows_carry_the_q_head_and_loss_figures(runs):
    rows = metrics(runs.base / "clean")
    train = [r for r in rows if "kind" not in r]
    evals = [r for r in rows if r.get("kind") == "eval"]
    assert all(0.0 <= r["train_q_halt_accuracy"] <= 1.0 for r in train)
    walls = [r["wall_s"] for r in train]
    assert walls == sorted(walls) and walls[-1] >= STEPS * STEP_FLOOR_MS / 1000
    assert [r["step"] for r in evals] == [10, 20, 30]
    for row in evals:
        assert row["loss"] > 0 and np.isfinite(row["loss"])
        assert 1.0 <= row["mean_halt_steps"] <= 3.0
        assert 0.0 <= row["q_halt_accuracy"] <= 1.0
    assert (runs.base / "clean" / "estimate.json").is_file()


def _eval_batch(runs, q_bias: tuple[float, float]) -> tuple[dict, dict]:
    spec = load_spec(runs.spec)
    dataset = json.loads((runs.data / "test" / "dataset.json").read_text())
    torch.manual_seed(0)
    model = TinyRecursiveModel(
        spec.arch, dataset["seq_len"], dataset["vocab_size"], dataset["num_puzzle_identifiers"]
    ).eval()
    with torch.no_grad():
        model.q_head.bias.copy_(torch.tensor(q_bias))
    prefix = runs.data / "test" / "all"
    batch = {
        name: torch.from_numpy(np.load(f"{prefix}__{name}.npy")[:8]).long()
        for name in ("inputs", "labels")
    }
    batch["puzzle_identifiers"] = torch.zeros(8, dtype=torch.long)
    outputs, halt_steps = run_all_steps(model, batch, spec.arch.halt_max_steps, host_placement())
    sums: dict[str, float] = {}
    add_halting_sums(sums, model, outputs, halt_steps, batch["labels"])
    exact = (outputs["logits"].argmax(-1) == batch["labels"]).all(-1).float().mean().item()
    return halting_metrics(sums), {"exact": exact, "max_steps": spec.arch.halt_max_steps}


def test_eval_halting_steps_and_q_halt_accuracy_follow_the_q_head(runs):
    # q_halt far below q_continue: the Q head never asks to halt, and it says "wrong"
    never, facts = _eval_batch(runs, (-5.0, 5.0))
    assert never["mean_halt_steps"] == facts["max_steps"]
    assert never["q_halt_accuracy"] == pytest.approx(1 - facts["exact"])
    # q_halt far above q_continue: it asks to halt at the first step, and it says "right"
    first, facts = _eval_batch(runs, (5.0, -5.0))
    assert first["mean_halt_steps"] == 1.0
    assert first["q_halt_accuracy"] == pytest.approx(facts["exact"])
    assert first["loss"] > 0 and never["loss"] > 0 and first["loss"] != never["loss"]


def test_faults_reads_leak_and_slow_amounts():
    from trm.plugins.operations.faults import Fault, parse_faults

    assert parse_faults("leak@3,slow@2:40") == [Fault("leak", 3, 4), Fault("slow", 2, 40)]
