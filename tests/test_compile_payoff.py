"""Small networks compiled when it pays: the compile ledger (what this machine measured), the
verdict (planned steps x saving against compile seconds), the planner settling
``runtime.compile = "auto"``, the loop and ``trm bench`` recording what they measured, and a
resumed run keeping what its checkpoint ran. No test compiles: the verdicts are fed figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tiny_run import build_tiny_data, write_spec
from trm.device.compile_ledger import (
    CompileRecord,
    cache_answer,
    lookup,
    read_ledger,
    record_measurement,
    use_persistent_compile_cache,
)
from trm.device.compile_payoff import (
    PRIOR_COMPILE_S,
    PRIOR_SAVING,
    PlannedWork,
    small_network_verdict,
)
from trm.loop.compile_record import MIN_TIMED_STEPS, WARM_AFTER_STEPS, StepClock
from trm.plan import plan_run
from trm.plugin_manager import load_plugins
from trm.plugins.backends import cpu
from trm.spec import apply_overrides, load_spec


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch) -> Path:
    """A ledger of this test's own (conftest turns the user's off for every test)."""
    path = tmp_path / "cache" / "compile-ledger.json"
    monkeypatch.setenv("TRM_COMPILE_LEDGER", str(path))
    monkeypatch.setattr(cpu, "cpp_compiler", lambda: "/usr/bin/g++")  # compiling is possible
    return path


# ------------------------------------------------------------------------------ the ledger


def test_measurements_merge_into_a_key_and_read_back(ledger: Path) -> None:
    assert record_measurement("k", eager_step_s=0.5)
    assert record_measurement("k", compiled_step_s=0.4, compile_s=12.0, compile_cache="cold")
    assert record_measurement("k", eager_step_s=0.6)  # the newest figure wins, others stay
    assert lookup("k") == CompileRecord(
        eager_step_s=0.6, compiled_step_s=0.4, compile_s=12.0, compile_cache="cold"
    )
    assert json.loads(ledger.read_text())["version"] == 1
    assert not list(ledger.parent.glob(".ledger-*"))  # the temporary file was renamed away


@pytest.mark.parametrize(
    "text",
    ["", "{not json", "[]", '{"entries": 3}', '{"entries": {"k": "fast"}}'],
    ids=["empty", "damaged", "a-list", "entries-not-a-map", "record-not-a-map"],
)
def test_a_damaged_ledger_reads_as_empty_and_is_rewritten(ledger: Path, text: str) -> None:
    ledger.parent.mkdir(parents=True)
    ledger.write_text(text)
    assert read_ledger() == {}
    assert record_measurement("k", eager_step_s=1.0)
    assert lookup("k") == CompileRecord(eager_step_s=1.0)


def test_nonsense_figures_in_a_record_are_dropped(ledger: Path) -> None:
    ledger.parent.mkdir(parents=True)
    entries = {
        "k": {"eager_step_s": -1, "compiled_step_s": "x", "compile_s": True, "compile_cache": "hot"}
    }
    ledger.write_text(json.dumps({"version": 1, "entries": entries}))
    assert lookup("k") == CompileRecord()


def test_an_unwritable_ledger_is_skipped(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TRM_COMPILE_LEDGER", str(blocker / "ledger.json"))
    assert not record_measurement("k", eager_step_s=1.0)
    assert read_ledger() == {}


def test_a_ledger_path_that_is_a_folder_is_skipped_and_leaves_nothing(tmp_path, monkeypatch):
    folder = tmp_path / "ledger.json"
    folder.mkdir()
    monkeypatch.setenv("TRM_COMPILE_LEDGER", str(folder))
    assert not record_measurement("k", eager_step_s=1.0)
    assert read_ledger() == {} and sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]


def test_off_reads_and_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRM_COMPILE_LEDGER", "off")
    assert not record_measurement("k", eager_step_s=1.0)
    assert read_ledger() == {} and not list(tmp_path.iterdir())


def test_torch_compile_caches_go_to_trms_cache_unless_the_user_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("TRM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert use_persistent_compile_cache() == tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    assert use_persistent_compile_cache() == Path("/somewhere/else")


def test_the_cache_answer_comes_from_torchs_hit_and_miss_counts() -> None:
    start = {"hits": 2, "misses": 1}
    assert cache_answer(start, {"hits": 6, "misses": 1}) == "warm"
    assert cache_answer(start, {"hits": 6, "misses": 2}) == "cold"
    assert cache_answer(start, start) == "unknown"


# ----------------------------------------------------------------------------- the verdict


def test_without_a_measured_eager_step_a_small_network_stays_eager() -> None:
    verdict = small_network_verdict(PlannedWork(steps=10**6), None)
    assert not verdict.compile and "not measured here yet" in verdict.reason


def test_the_priors_weigh_the_measured_eager_step_against_the_planned_steps() -> None:
    record = CompileRecord(eager_step_s=0.25)
    # the break-even: steps x 0.25 s x PRIOR_SAVING = PRIOR_COMPILE_S
    even = PRIOR_COMPILE_S / (0.25 * PRIOR_SAVING)
    long_run = small_network_verdict(PlannedWork(steps=int(even) + 10), record)
    short_run = small_network_verdict(PlannedWork(steps=int(even) - 10), record)
    assert long_run.compile and long_run.reason.startswith("compiling the small network")
    assert "expected" in long_run.reason
    assert not short_run.compile and "would not pay" in short_run.reason


def test_measured_figures_replace_the_priors() -> None:
    # compiling measured 10x faster with a warm 2 s compile: 20 steps of 0.1 s pay
    fast = CompileRecord(
        eager_step_s=0.1, compiled_step_s=0.01, compile_s=2.0, compile_cache="warm"
    )
    verdict = small_network_verdict(PlannedWork(steps=30), fast)
    assert verdict.compile and "90% (measured)" in verdict.reason and "warm cache" in verdict.reason
    # measured slower compiled: never pays, however long the run
    slower = CompileRecord(eager_step_s=0.1, compiled_step_s=0.12, compile_s=1.0)
    assert not small_network_verdict(PlannedWork(steps=10**9), slower).compile


def test_a_time_budget_weighs_the_budget_not_the_steps() -> None:
    assert small_network_verdict(PlannedWork(budget_s=1800), None).compile  # 180 s > 30 s
    assert not small_network_verdict(PlannedWork(budget_s=120), None).compile  # 12 s < 30 s


def test_unknown_steps_stay_eager() -> None:
    verdict = small_network_verdict(PlannedWork(), CompileRecord(eager_step_s=1.0))
    assert not verdict.compile and "not known" in verdict.reason


# ------------------------------------------------------------------------------ the planner


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    return build_tiny_data(tmp_path_factory.mktemp("compile-payoff") / "data")


def _plan(spec_path: Path, tmp_path: Path, *overrides: str):
    spec = apply_overrides(load_spec(spec_path), ["runtime.compile=auto", *overrides])
    return plan_run(load_plugins([]), spec, None, tmp_path / "run")


def test_the_planner_settles_auto_from_the_ledger(ledger, tiny_data, tmp_path) -> None:
    spec_path = write_spec(tmp_path, tiny_data)
    first = _plan(spec_path, tmp_path, "train.max_steps=4000")
    assert first.runtime.compile_by_planner and not first.runtime.compile
    assert first.runtime.compile_key is not None and "not measured" in first.runtime.notes[-1]
    key = first.runtime.compile_key
    assert "hidden 16" in key and "positions 17" in key and "rows 4" in key  # its micro-batch
    record_measurement(key, eager_step_s=0.1)  # 8000 x 0.1 s x 10% = 80 s > 70 s
    assert PRIOR_COMPILE_S < 8000 * 0.1 * PRIOR_SAVING
    second = _plan(spec_path, tmp_path, "train.max_steps=8000")
    assert second.runtime.compile and second.runtime.notes[-1].startswith("compiling")
    short = _plan(spec_path, tmp_path, "train.max_steps=100")
    assert not short.runtime.compile and "would not pay" in short.runtime.notes[-1]


def test_on_and_off_are_never_second_guessed(ledger, tiny_data, tmp_path) -> None:
    spec_path = write_spec(tmp_path, tiny_data)
    assert _plan(spec_path, tmp_path, "runtime.compile=on").runtime.compile
    off = _plan(spec_path, tmp_path, "runtime.compile=off").runtime
    assert not off.compile and not off.compile_by_planner and off.compile_key is None


# ---------------------------------------------------------------- what runs and bench record


def test_the_step_clock_records_the_warm_median_and_the_compile_seconds(ledger) -> None:
    eager = StepClock("eager-key")
    for seconds in [5.0, 1.0, 1.0, 0.2, 0.3, 0.2, 0.25, 0.2]:
        eager.add(seconds)
    assert eager.record(compiled=False) and lookup("eager-key") == CompileRecord(eager_step_s=0.2)
    compiled = StepClock("compiled-key")
    for seconds in [20.0, 3.0, 1.0, *[0.1] * MIN_TIMED_STEPS]:
        compiled.add(seconds)
    assert compiled.record(compiled=True)
    record = lookup("compiled-key")
    assert record.compiled_step_s == pytest.approx(0.1)
    assert record.compile_s == pytest.approx(24.0 - WARM_AFTER_STEPS * 0.1)
    too_few = StepClock("few")
    for _ in range(WARM_AFTER_STEPS + MIN_TIMED_STEPS - 1):
        too_few.add(0.1)
    assert not too_few.record(compiled=False) and lookup("few") is None
    nothing = StepClock(None)  # a run the planner did not decide for
    nothing.add(1.0)
    assert not nothing.by_depth and not nothing.record(compiled=False)


def test_the_step_clock_counts_each_depths_compile_and_the_timings(ledger) -> None:
    """A curriculum compiles each new depth at its first steps: each depth's first steps are
    measured against its own warm median (a deeper, slower depth later does not hide the
    first depth's compile), a depth with too few warm steps adds nothing, and the seconds the
    budget's timing spent compiling are added."""
    clock = StepClock("curriculum-key")
    for seconds in [10.0, 1.0, 1.0, *[0.1] * MIN_TIMED_STEPS]:
        clock.add(seconds, (1, 1))
    for seconds in [8.0, 0.5, 0.5, *[0.4] * (MIN_TIMED_STEPS + 2)]:
        clock.add(seconds, (2, 3))
    for seconds in [30.0, 0.9]:
        clock.add(seconds, (3, 3))  # too few warm steps to know this depth's step time
    clock.add_compile_seconds(40.0)
    clock.add_compile_seconds(-1.0)  # a timing noisier than its compile adds nothing
    in_loop = (12.0 - WARM_AFTER_STEPS * 0.1) + (9.0 - WARM_AFTER_STEPS * 0.4)
    assert clock.compile_s() == pytest.approx(40.0 + in_loop)
    assert clock.record(compiled=True)
    record = lookup("curriculum-key")
    assert record.compile_s == pytest.approx(40.0 + in_loop)
    assert record.compiled_step_s == pytest.approx(0.4)  # the median of every depth's warm steps


def test_a_run_records_its_eager_step_and_a_resume_keeps_its_checkpoints_choice(
    ledger, tiny_data, tmp_path, cli
) -> None:
    spec_path = write_spec(tmp_path, tiny_data, max_steps=20)  # the resumed part times 11 steps
    spec_path.write_text(
        spec_path.read_text().replace('precision = "fp32"', 'precision = "fp32"\ncompile = "auto"')
    )
    out = tmp_path / "run"
    first = cli("run", spec_path, "--out", out, "--max-steps", "9")
    assert first.code == 0, first.err
    assert "not measured here yet" in first.err
    ((key, record),) = read_ledger().items()
    assert record.eager_step_s is not None and record.compiled_step_s is None
    # the ledger now says compiling pays for the 20 planned steps; the resumed run keeps the
    # eager network its checkpoint was written under
    record_measurement(key, eager_step_s=100.0)
    rest = cli("run", spec_path, "--out", out)
    assert rest.code == 0, rest.err
    assert "compiling the small network" in rest.err
    assert "running the network eager, as the run did before its checkpoint at step 9" in rest.err
    # it ran eager, so what it measured is an eager step again (never a compiled one)
    after = lookup(key)
    assert after.compiled_step_s is None and after.eager_step_s != 100.0


def test_bench_records_a_small_networks_step_and_says_so(ledger, tiny_data, tmp_path, cli):
    spec_path = write_spec(tmp_path, tiny_data)
    result = cli(
        "bench",
        spec_path,
        "--steps",
        "3",
        "--warmup",
        "1",
        "--no-plain",
        "--json",
        "--peak-seconds",
        "0.1",
    )
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["compiled"] is False and document["compile_s"] is None
    key = document["compile_ledger_key"]
    assert key is not None and lookup(key).eager_step_s == pytest.approx(
        sorted(document["step_s"])[1]
    )


# ------------------------------------------------------------ benchmarks/compile_payoff.py


def test_the_payoff_summary_is_the_median_saving_and_the_break_even_steps() -> None:
    from tests.test_peers_benchmark import _load

    payoff = _load("compile_payoff")
    runs = {
        "eager": [{"step_s_median": 0.5}, {"step_s_median": 0.7}],
        "compiled, cold cache": [{"step_s_median": 0.4, "compile_s": 30.0}],
        "compiled, warm cache": [{"step_s_median": 0.4, "compile_s": 3.0}, {"error": "x"}],
    }
    summary = payoff.summarise(runs)
    assert summary["eager_step_s"] == pytest.approx(0.6)
    assert summary["saving"] == pytest.approx(1 / 3)
    assert summary["pays_after_steps_cold"] == pytest.approx(150.0)
    assert summary["pays_after_steps_warm"] == pytest.approx(15.0)
    document = {"batch": 128, "specs": [{"spec": "quickstart", "summary": summary}]}
    (row,) = payoff.table_rows(document)
    assert row[:5] == ["quickstart", "128", "0.600", "0.400", "33%"] and row[-2:] == ["150", "15"]
    slower = payoff.summarise({**runs, "compiled, warm cache": [{"step_s_median": 0.9}]})
    assert slower["saving"] < 0 and slower["pays_after_steps_cold"] is None
