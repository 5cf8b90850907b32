"""A wall-time budget (``train.time_budget_s``): the steps follow the measured speed.

The speed is injected: ``trm.api.training.time_depths`` (the real loop's timer) is replaced by
a table of seconds per step at each depth, so nothing here depends on this machine's clock.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error
from tests.tiny_run import build_tiny_data, metrics, summary, write_spec
from trm.contrib.curriculum import CurriculumOptions, Stage
from trm.hookspecs import hookimpl
from trm.plan import plan_run
from trm.plan.budget import (
    BUDGET_RECORD,
    MIN_PLANNED_STEPS,
    recursion_schedule,
    steps_for_budget,
)
from trm.plugin_manager import load_plugins
from trm.recursion import RecursionShare
from trm.spec import load_spec

# seconds per step at the curriculum's depths for a final depth (2, 3): (1, 1), (1, 2), (2, 3)
SPEED = {(1, 1): 0.1, (1, 2): 0.2, (2, 3): 0.4}
STAGED = ("--plugins", "curriculum", "--set", "plugins.curriculum.schedule=staged")
DEEPER = ("--set", "arch.L_cycles=3")  # the tiny spec at (2, 3), as sudoku9-laptop


class FakeTimer:
    """Stands in for ``time_depths``: answers from a table and records each call."""

    def __init__(self, seconds: dict[tuple[int, int], float]) -> None:
        self.seconds = seconds
        self.calls: list[tuple[list[tuple[int, int]], list[str]]] = []

    def __call__(self, plan, depths, plugins_off, requested_plugins=(), log=print, clock=None):
        self.calls.append((list(depths), list(plugins_off)))
        return {depth: self.seconds[depth] for depth in depths}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return build_tiny_data(tmp_path_factory.mktemp("budget") / "data")


@pytest.fixture
def spec_path(tmp_path, data_dir) -> Path:
    return write_spec(tmp_path / "spec", data_dir, time_budget_s=5, checkpoint_interval_steps=0)


def inject(monkeypatch, seconds: dict[tuple[int, int], float]) -> FakeTimer:
    timer = FakeTimer(seconds)
    monkeypatch.setattr("trm.api.training.time_depths", timer)
    return timer


def staged_spec(tmp_path, data_dir):
    path = write_spec(tmp_path / "s", data_dir)
    spec = load_spec(path)
    arch = attrs.evolve(spec.arch, L_cycles=3)
    return attrs.evolve(spec, arch=arch, plugins={"curriculum": {"schedule": "staged"}})


def planned(spec, seconds, budget_s=100.0) -> int:
    pm = load_plugins(["curriculum"])
    steps, _ = steps_for_budget(budget_s, lambda n: recursion_schedule(pm, spec, n), seconds)
    return steps


# ----------------------------------------------------------------------- the arithmetic


def test_the_staged_curriculum_declares_its_stages_as_step_shares(tmp_path, data_dir):
    pm = load_plugins(["curriculum"])
    shares = recursion_schedule(pm, staged_spec(tmp_path, data_dir), 1000)
    assert [(s.fraction, s.depth) for s in shares] == [(0.3, (1, 1)), (0.3, (1, 2)), (0.4, (2, 3))]


def test_without_a_scheduling_plugin_every_step_is_at_the_specs_depth(tmp_path, data_dir):
    spec = load_spec(write_spec(tmp_path, data_dir))
    shares = recursion_schedule(load_plugins([]), spec, 1000)
    assert [(s.fraction, s.depth) for s in shares] == [(1.0, (2, 2))]


def run_seconds(total: int, seconds: dict[tuple[int, int], float]) -> float:
    """The training time of a ``total``-step staged run at (2, 3), step by step."""
    options = CurriculumOptions(schedule="staged")
    return sum(seconds[options.depth_at(step, total, (2, 3))[0]] for step in range(total))


@pytest.mark.parametrize(
    "seconds",
    [
        SPEED,
        {**SPEED, (2, 3): 0.8},
        {**SPEED, (1, 1): 0.4},
        {(1, 1): 0.013, (1, 2): 0.7, (2, 3): 3},
    ],
)
def test_planned_steps_are_the_most_that_fit_the_budget(tmp_path, data_dir, seconds):
    steps = planned(staged_spec(tmp_path, data_dir), seconds)
    assert run_seconds(steps, seconds) <= 100 + 1e-9 < run_seconds(steps + 1, seconds)


def test_planned_steps_follow_the_speed(tmp_path, data_dir):
    spec = staged_spec(tmp_path, data_dir)
    base = planned(spec, SPEED)
    assert base == 400  # 0.3 × 400 × 0.1 + 0.3 × 400 × 0.2 + 0.4 × 400 × 0.4 = 100 s
    assert planned(spec, {depth: 2 * s for depth, s in SPEED.items()}) == base // 2
    slow_deep = planned(spec, {**SPEED, (2, 3): 0.8})
    slow_shallow = planned(spec, {**SPEED, (1, 1): 0.4})
    assert slow_deep < slow_shallow < base  # the deep stage holds the most steps


@settings(max_examples=200, deadline=None)
@given(
    final=st.tuples(st.integers(1, 4), st.integers(1, 6)),
    total=st.integers(1, 400),
    linear=st.booleans(),
    start=st.tuples(st.integers(0, 4), st.integers(0, 6)),
    end_fraction=st.floats(0.01, 1.0),
    end_step=st.integers(0, 500),
    cut=st.floats(0.05, 0.95),
)
def test_steps_per_depth_counts_what_depth_at_gives_each_step(
    final, total, linear, start, end_fraction, end_step, cut
):
    if linear:
        options = CurriculumOptions(
            schedule="linear",
            start_H_cycles=min(start[0], final[0]),
            start_L_cycles=min(start[1], final[1]),
            end_fraction=end_fraction,
            end_step=end_step,
        )
    else:
        options = CurriculumOptions(schedule="staged", stages=(Stage(cut, 1, 1),))
    counted: list[tuple[int, tuple[int, int]]] = []
    for step in range(total):
        depth = options.depth_at(step, total, final)[0]
        if counted and counted[-1][1] == depth:
            counted[-1] = (counted[-1][0] + 1, depth)
        else:
            counted.append((1, depth))
    assert options.steps_per_depth(total, final) == counted


# ----------------------------------------------------------------------- through trm run


def test_trm_run_plans_its_steps_from_the_measured_speed(cli, monkeypatch, spec_path, tmp_path):
    timer = inject(monkeypatch, SPEED)
    out = tmp_path / "run"
    result = cli("run", spec_path, "--out", out, *STAGED, *DEEPER)
    assert result.code == 0, result.err
    steps = int(5 / (0.3 * 0.1 + 0.3 * 0.2 + 0.4 * 0.4))  # 20
    assert f"steps: {steps:,} planned for 5 s from measured 0.10/0.20/0.40 s per step" in result.err
    assert timer.calls == [([(1, 1), (1, 2), (2, 3)], ["curriculum"])]
    assert load_spec(out / "spec.toml").train.max_steps == steps
    assert summary(out)["steps"] == steps and summary(out)["stopped"] == "finished"
    record = json.loads((out / BUDGET_RECORD).read_text())
    assert record["steps"] == steps and record["budget_s"] == 5
    assert [s["step_s"] for s in record["stages"]] == [0.1, 0.2, 0.4]
    depths = [(r["H_cycles"], r["L_cycles"]) for r in metrics(out) if "kind" not in r]
    assert depths == [(1, 1)] * 6 + [(1, 2)] * 6 + [(2, 3)] * 8  # the stages of 20 steps


def test_a_slower_machine_plans_fewer_steps(cli, monkeypatch, spec_path, tmp_path):
    inject(monkeypatch, {depth: 2 * s for depth, s in SPEED.items()})
    out = tmp_path / "run"
    result = cli("run", spec_path, "--out", out, *STAGED, *DEEPER)
    assert result.code == 0, result.err
    assert "steps: 10 planned for 5 s from measured 0.20/0.40/0.80 s per step" in result.err
    assert summary(out)["steps"] == 10


def test_a_resumed_run_keeps_its_planned_steps(cli, monkeypatch, spec_path, tmp_path):
    inject(monkeypatch, SPEED)
    out = tmp_path / "run"
    args = (
        "run",
        spec_path,
        "--out",
        out,
        *STAGED,
        *DEEPER,
        "--set",
        "train.checkpoint_interval_steps=4",
    )
    assert cli(*args).code == 0
    first = [r for r in metrics(out) if "kind" not in r]
    # lose the end: back to the checkpoint of step 16, then resume on a machine twice as slow
    (out / "checkpoints" / "step-00000020.pt").unlink()
    (out / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in metrics(out) if r.get("step", 0) <= 16)
    )
    timer = inject(monkeypatch, {depth: 2 * s for depth, s in SPEED.items()})
    result = cli(*args)
    assert result.code == 0, result.err
    assert timer.calls == []  # never timed again
    assert "steps: 20 planned at the run's first start for 5 s (budget.json)" in result.err
    assert "continuation differs" not in result.err
    again = [r for r in metrics(out) if "kind" not in r]
    assert [r["step"] for r in again] == list(range(1, 21))
    for key in ("loss", "lr", "H_cycles", "L_cycles"):  # the same schedule, exactly
        assert [r[key] for r in again[16:]] == [r[key] for r in first[16:]]


@pytest.mark.parametrize(
    ("given", "steps", "said"),
    [
        (("--max-steps", "3"), 3, "--max-steps 3 given"),
        (("--set", "train.max_steps=4"), 4, "--set train.max_steps=4 given"),
    ],
)
def test_steps_the_user_gives_win_over_the_budget(
    cli, monkeypatch, spec_path, tmp_path, given, steps, said
):
    timer = inject(monkeypatch, SPEED)
    out = tmp_path / "run"
    result = cli("run", spec_path, "--out", out, *STAGED, *DEEPER, *given)
    assert result.code == 0, result.err
    assert f"steps: {said}, so the time budget (train.time_budget_s) is not used" in result.err
    assert timer.calls == []
    assert summary(out)["steps"] == steps
    assert not (out / BUDGET_RECORD).exists()


def test_a_budget_too_small_for_a_few_steps_is_one_error_line(cli, monkeypatch, tmp_path, data_dir):
    spec = write_spec(tmp_path / "spec", data_dir, time_budget_s=2)
    inject(monkeypatch, SPEED)
    out = tmp_path / "run"
    result = cli("run", spec, "--out", out, *STAGED, *DEEPER)
    assert_one_line_error(
        result, "train.time_budget_s: 2 s fits only 8 step(s)", f"at least {MIN_PLANNED_STEPS}"
    )
    assert not out.exists()


def test_the_budget_key_is_range_checked(cli, tmp_path, data_dir):
    spec = write_spec(tmp_path / "spec", data_dir, time_budget_s=-1)
    assert_one_line_error(cli("run", spec, "--out", tmp_path / "run"), "train.time_budget_s")
    assert not (tmp_path / "run").exists()


def test_the_laptop_recipe_plans_30_minutes():
    from trm.spec import resolve_spec_path

    spec = load_spec(resolve_spec_path("sudoku9-laptop"))
    assert spec.train.time_budget_s == 1800 and spec.train.max_steps > 0  # max_steps: fallback


def test_the_real_timer_times_each_depth_with_the_real_loop_and_leaves_nothing(tmp_path, data_dir):
    from trm.measure.stage_speed import TIMED_STEPS, WARMUP_STEPS, time_depths
    from trm.plan import plan_run

    spec = load_spec(write_spec(tmp_path / "spec", data_dir))
    spec = attrs.evolve(spec, plugins={"curriculum": {"schedule": "staged"}})
    pm = load_plugins(["curriculum"])
    run_dir = tmp_path / "run"
    plan = plan_run(pm, spec, None, run_dir)
    lines: list[str] = []
    seconds = time_depths(plan, [(1, 1), (2, 2)], ["curriculum"], ["curriculum"], lines.append)
    assert set(seconds) == {(1, 1), (2, 2)} and all(s > 0 for s in seconds.values())
    assert f"timing {WARMUP_STEPS} warm-up + {TIMED_STEPS} steps of 8 samples" in lines[0]
    assert "(these steps are discarded)" in lines[0]
    assert not run_dir.exists()


def test_the_timer_adds_each_depths_compile_seconds_to_the_runs_clock(monkeypatch, tmp_path):
    """With the network compiled, the warm-up steps of each timed depth compile it: their
    seconds above the depth's median go to the run's step clock; eager, nothing does."""
    from trm.loop.compile_record import StepClock
    from trm.measure import stage_speed
    from trm.measure.loop_timing import LoopTiming

    def fake_loop(spec, runtime, requested, data_dir, run_dir, warmup):
        step = 0.1 * spec.arch.H_cycles
        return LoopTiming(batch_size=8, warmup_s=(5.0, 1.0), step_s=(step,) * 5)

    monkeypatch.setattr(stage_speed, "time_loop", fake_loop)
    data = build_tiny_data(tmp_path / "data")
    spec = load_spec(write_spec(tmp_path / "spec", data))
    plan = plan_run(load_plugins([]), spec, None, tmp_path / "run")
    for compiled, expected in [(True, (6.0 - 0.2) + (6.0 - 0.4)), (False, 0.0)]:
        timed = attrs.evolve(plan, runtime=attrs.evolve(plan.runtime, compile=compiled))
        clock = StepClock("key")
        seconds = stage_speed.time_depths(
            timed, [(1, 1), (2, 2)], [], [], lambda _line: None, clock
        )
        assert seconds == {(1, 1): 0.1, (2, 2): 0.2}
        assert clock.compile_s() == pytest.approx(expected)


def test_a_run_started_without_a_plan_keeps_its_schedule_on_resume(
    cli, monkeypatch, spec_path, tmp_path
):
    timer = inject(monkeypatch, SPEED)
    out = tmp_path / "run"
    assert cli("run", spec_path, "--out", out, "--max-steps", "3").code == 0
    assert not (out / BUDGET_RECORD).exists()
    result = cli("run", spec_path, "--out", out)
    assert result.code == 0, result.err
    assert "started without a time-budget plan; its schedule is kept" in result.err
    assert timer.calls == []
    assert summary(out)["steps"] == load_spec(spec_path).train.max_steps == 12


class LengthDependentSchedule:
    """A scheduling plugin whose depths depend on the run's length: a run of fewer than 1,000
    steps spends its first half at (1, 1), a longer one trains at (2, 2) throughout."""

    @hookimpl
    def recursion_schedule(self, spec, total_steps):
        if total_steps >= 1000:
            return [RecursionShare(1.0, 2, 2)]
        return [RecursionShare(0.5, 1, 1), RecursionShare(0.5, 2, 2)]


def test_a_depth_only_shorter_runs_train_at_is_timed_too(tmp_path, data_dir):
    from trm.plan import plan_run
    from trm.plan.budget import plan_steps

    spec = load_spec(write_spec(tmp_path / "spec", data_dir, time_budget_s=100))
    pm = load_plugins([], extra_modules=[("by-length", LengthDependentSchedule())])
    plan = plan_run(pm, spec, None, tmp_path / "run")
    timer, lines = FakeTimer({(1, 1): 0.1, (2, 2): 0.4}), []
    adapted, budget = plan_steps(pm, plan, tmp_path / "run", "never", None, timer, lines.append)
    assert [depths for depths, _ in timer.calls] == [[(2, 2)], [(1, 1)]]
    assert budget is not None and budget.steps == 400  # 0.5 × 400 × 0.1 + 0.5 × 400 × 0.4
    assert adapted.spec.train.max_steps == 400
    assert [(s.H_cycles, s.L_cycles, s.step_s) for s in budget.stages] == [
        (1, 1, 0.1),
        (2, 2, 0.4),
    ]


def test_the_laptop_recipes_quoted_plan_is_what_its_quoted_times_give():
    """The plan line sudoku9-laptop's comment quotes gives a step count its own step times
    (shown to 2 decimals, as trm prints them) can give, at the staged curriculum's shares
    0.3/0.3/0.4; and that count is the spec's fallback ``max_steps``."""
    import re

    from trm.spec import resolve_spec_path

    path = resolve_spec_path("sudoku9-laptop")
    text = " ".join(line.lstrip("# ") for line in path.read_text().splitlines())
    found = re.search(r"steps: ([\d,]+) planned for 30 min from measured ([\d./]+) s per", text)
    assert found, "the spec quotes its plan line"
    steps = int(found.group(1).replace(",", ""))
    times = [float(t) for t in found.group(2).split("/")]
    shares = (0.3, 0.3, 0.4)
    fastest = sum(f * (t - 0.005) for f, t in zip(shares, times, strict=True))
    slowest = sum(f * (t + 0.005) for f, t in zip(shares, times, strict=True))
    assert 1800 / slowest <= steps <= 1800 / fastest
    assert load_spec(path).train.max_steps == steps


def test_the_real_timer_leaves_every_random_generator_as_it_found_it(tmp_path, data_dir):
    import random

    import numpy as np
    import torch

    from trm.measure.stage_speed import time_depths
    from trm.plan import plan_run

    spec = load_spec(write_spec(tmp_path / "spec", data_dir))
    plan = plan_run(load_plugins([]), spec, None, tmp_path / "run")
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    before = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    time_depths(plan, [(1, 1)], [], [], lambda _line: None)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == before


class RealTimerFixedPlan:
    """The real timer (the loop trains, drawing from every generator), answering 1 s a step
    at each depth, so a budget of N seconds plans exactly N steps whatever this machine's
    speed."""

    def __call__(self, plan, depths, plugins_off, requested_plugins=(), log=print, clock=None):
        from trm.measure.stage_speed import time_depths

        time_depths(plan, depths, plugins_off, requested_plugins, lambda _line: None, clock)
        return dict.fromkeys(depths, 1.0)


def test_a_budgeted_run_is_bit_identical_to_the_same_steps_given(cli, monkeypatch, tmp_path):
    data = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path / "spec", data, time_budget_s=12, checkpoint_interval_steps=0)
    monkeypatch.setattr("trm.api.training.time_depths", RealTimerFixedPlan())
    budgeted, given = tmp_path / "budgeted", tmp_path / "given"
    result = cli("run", spec, "--out", budgeted)
    assert result.code == 0, result.err
    assert "steps: 12 planned" in result.err
    result = cli("run", spec, "--out", given, "--set", "train.max_steps=12")
    assert result.code == 0, result.err
    assert summary(budgeted)["steps"] == summary(given)["steps"] == 12
    assert summary(budgeted)["final_weights_sha256"] == summary(given)["final_weights_sha256"]
