"""The contrib research plugins: curriculum recursion and adaptive halting.

Their schedules at chosen steps, the loop carrying out their requests (metrics rows, the
checkpoint, exact resume, a bad table refused before anything is built), the model's depth
switch leaving the default path bit-identical and torch.compile recompiling at most once
for a new depth, and the import contract that keeps them acting only through ``control``.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error
from tests.test_architecture import LINT_IMPORTS, _lint, installed_copy  # noqa: F401
from tests.tiny_run import TOTAL_STEPS, build_tiny_data, metrics, summary, write_spec
from trm.cli.main import main
from trm.contrib.adaptive_halting import AdaptiveHaltingOptions
from trm.contrib.curriculum import CurriculumOptions, Stage
from trm.control import TrainControl
from trm.device.compile import compile_network
from trm.model import TinyRecursiveModel
from trm.spec import ArchSpec

BOTH = "curriculum,adaptive-halting"

# 12 steps: stage 1 for steps 0-2, stage 2 for 3-5, then the spec's (2, 2).
TABLES = """
[plugins.curriculum]
schedule = "staged"
stages = [
    { until_fraction = 0.25, H_cycles = 1, L_cycles = 1 },
    { until_fraction = 0.5, H_cycles = 2, L_cycles = 1 },
]

[plugins.adaptive-halting]
start_prob = 0.6
final_prob = 0.1
end_fraction = 0.75
"""


# ---------------------------------------------------------------- schedules


def test_the_linear_curriculum_grows_from_its_start_to_the_specs_depth_by_its_end_step():
    options = CurriculumOptions(start_H_cycles=1, start_L_cycles=2, end_step=100)
    depth = {step: options.depth_at(step, 400, (3, 6))[0] for step in (0, 1, 49, 50, 99, 100, 399)}
    assert depth == {
        0: (1, 2),
        1: (1, 2),
        49: (1, 3),
        50: (2, 4),
        99: (2, 5),
        100: (3, 6),
        399: (3, 6),
    }


def test_the_linear_curriculum_ends_at_its_fraction_of_the_total_steps():
    options = CurriculumOptions(end_fraction=0.5)  # start (1, 2)
    assert options.depth_at(499, 1000, (2, 6))[0] == (1, 5)
    assert options.depth_at(500, 1000, (2, 6))[0] == (2, 6)


def test_the_staged_curriculum_defaults_to_cgar_stages_then_the_specs_depth():
    options = CurriculumOptions(schedule="staged")
    depth = {step: options.depth_at(step, 1000, (3, 6)) for step in (0, 299, 300, 599, 600, 999)}
    assert depth == {
        0: ((1, 2), "curriculum stage 1 of 3"),
        299: ((1, 2), "curriculum stage 1 of 3"),
        300: ((2, 4), "curriculum stage 2 of 3"),
        599: ((2, 4), "curriculum stage 2 of 3"),
        600: ((3, 6), "curriculum stage 3 of 3"),
        999: ((3, 6), "curriculum stage 3 of 3"),
    }


@pytest.mark.parametrize(
    ("final", "first", "second"),
    [
        ((3, 6), (1, 2), (2, 4)),
        ((2, 3), (1, 1), (1, 2)),
        ((4, 8), (1, 3), (3, 5)),
        ((1, 1), (1, 1), (1, 1)),
    ],
)
def test_the_default_stages_and_start_are_cgars_thirds_of_the_specs_depth(final, first, second):
    staged = CurriculumOptions(schedule="staged")
    assert [staged.depth_at(s, 100, final)[0] for s in (0, 29, 30, 59, 60)] == [
        first,
        first,
        second,
        second,
        final,
    ]
    assert CurriculumOptions().depth_at(0, 100, final)[0] == first


def test_a_stage_deeper_than_an_adapted_spec_is_held_to_the_specs_depth():
    options = CurriculumOptions(schedule="staged", stages=(Stage(0.5, 2, 4),))
    assert options.depth_at(400, 1000, (2, 3))[0] == (2, 3)


@given(
    total=st.integers(1, 5000),
    start=st.tuples(st.integers(1, 4), st.integers(1, 8)),
    final=st.tuples(st.integers(1, 4), st.integers(1, 8)),
    fraction=st.floats(0.01, 1.0),
)
def test_the_linear_depth_never_shrinks_never_passes_the_spec_and_reaches_it(
    total, start, final, fraction
):
    options = CurriculumOptions(
        start_H_cycles=start[0], start_L_cycles=start[1], end_fraction=fraction
    )
    steps = sorted({0, 1, total // 3, total // 2, total - 1, max(total - 1, 0)})
    depths = [options.depth_at(step, total, final)[0] for step in steps]
    assert all(1 <= H <= final[0] and 1 <= L <= final[1] for H, L in depths)
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in itertools.pairwise(depths))
    assert options.depth_at(total, total, final)[0] == final


def test_adaptive_halting_anneals_linearly_then_holds_the_final_probability():
    options = AdaptiveHaltingOptions(start_prob=0.3, final_prob=0.05)  # over the whole run
    values = [options.probability_at(step, 100) for step in (0, 50, 99, 100, 150)]
    assert values == pytest.approx([0.3, 0.175, 0.30 - 0.25 * 0.99, 0.05, 0.05])
    early = AdaptiveHaltingOptions(start_prob=0.5, final_prob=0.0, end_step=10)
    assert [early.probability_at(s, 100) for s in (0, 5, 10, 99)] == pytest.approx(
        [0.5, 0.25, 0.0, 0.0]
    )


# ---------------------------------------------------------------- the model's depth switch


def _tiny_model(**arch) -> tuple[TinyRecursiveModel, dict[str, torch.Tensor]]:
    settings = {
        "hidden_size": 16,
        "expansion": 2.0,
        "num_heads": 2,
        "L_layers": 1,
        "H_cycles": 2,
        "L_cycles": 3,
        "pos_encodings": "none",
        "mlp_t": True,
        "puzzle_emb_ndim": 0,
        "puzzle_emb_len": 1,
        "halt_max_steps": 3,
    }
    spec = ArchSpec(**{**settings, **arch})
    torch.manual_seed(0)
    model = TinyRecursiveModel(spec, seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    generator = torch.Generator().manual_seed(1)
    batch = {
        "inputs": torch.randint(0, 6, (8, 16), generator=generator),
        "labels": torch.randint(0, 6, (8, 16), generator=generator),
        "puzzle_identifiers": torch.zeros(8, dtype=torch.long),
    }
    return model, batch


def _two_steps(model: TinyRecursiveModel, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    torch.manual_seed(5)
    carry = model.initial_carry(batch)
    results = []
    for _ in range(2):
        carry, outputs = model(carry, batch)
        outputs["logits"].float().square().mean().backward()
        results += [outputs["logits"].detach(), carry.halted.clone()]
    results += [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return results


def test_setting_the_specs_own_depth_and_exploration_changes_nothing_bit_for_bit():
    model, batch = _tiny_model(halt_exploration_prob=0.5)
    before = _two_steps(model, batch)
    model.zero_grad(set_to_none=True)
    model.set_recursion(H_cycles=2, L_cycles=3, halt_exploration_prob=0.5)
    after = _two_steps(model, batch)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_shallower_depth_computes_a_different_answer_with_the_same_shapes():
    model, batch = _tiny_model()
    deep = _two_steps(model, batch)
    model.zero_grad(set_to_none=True)
    model.set_recursion(H_cycles=1, L_cycles=1)
    shallow = _two_steps(model, batch)
    assert [t.shape for t in deep] == [t.shape for t in shallow]
    assert not torch.equal(deep[0], shallow[0])


def test_the_control_refuses_an_impossible_depth_or_probability():
    control = TrainControl()
    with pytest.raises(ValueError):
        control.set_recursion_depth(0, 2, "test")
    with pytest.raises(ValueError):
        control.set_halt_exploration(1.5, "test")
    control.set_recursion_depth(1, 2, "a")
    control.set_recursion_depth(2, 3, "b")
    assert control.recursion_request == (2, 3, "b")


def test_a_new_depth_compiles_the_region_once_and_a_depth_seen_before_compiles_nothing():
    """The compiled unit is the whole recursion (trm.model.region), unrolled at the depth in
    force: a stage at a new depth compiles it once more (its training graph), a return to a
    depth already run compiles nothing. Counted with Dynamo's counters (the eager backend
    compiles in milliseconds; Inductor's guards are Dynamo's, the same)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model, batch = _tiny_model(H_cycles=3, L_cycles=4)
    cpu_backend = SimpleNamespace(compile=lambda unit: unit.compile(backend="eager"))
    compile_network(model, cpu_backend)
    stages = [(1, 2), (2, 4), (3, 4), (3, 2), (3, 4), (1, 2)]
    graphs = []
    for H_cycles, L_cycles in stages:
        model.set_recursion(H_cycles=H_cycles, L_cycles=L_cycles)
        _two_steps(model, batch)
        graphs.append(counters["stats"]["unique_graphs"])
    torch._dynamo.reset()
    new_graphs = [graphs[0]] + [b - a for a, b in itertools.pairwise(graphs)]
    assert new_graphs == [1, 1, 1, 1, 0, 0]


# ---------------------------------------------------------------- through the loop


def _run(spec: Path, run_dir: Path, *args: str) -> int:
    return main(["run", str(spec), "--out", str(run_dir), *args])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("contrib")
    data = build_tiny_data(base / "data")
    plain = write_spec(base / "plain", data)
    scheduled = write_spec(base / "scheduled", data)
    scheduled.write_text(scheduled.read_text() + TABLES)
    reference = base / "reference"
    assert _run(scheduled, reference, "--plugins", BOTH) == 0
    return SimpleNamespace(base=base, data=data, plain=plain, spec=scheduled, reference=reference)


def _train_rows(run_dir: Path) -> list[dict]:
    return [row for row in metrics(run_dir) if "kind" not in row]


def test_every_metrics_row_records_the_depth_and_exploration_in_force(tiny):
    rows = _train_rows(tiny.reference)
    assert [row["step"] for row in rows] == list(range(1, TOTAL_STEPS + 1))
    depths = [(row["H_cycles"], row["L_cycles"]) for row in rows]
    assert depths == [(1, 1)] * 3 + [(2, 1)] * 3 + [(2, 2)] * 6
    probabilities = [row["halt_exploration_prob"] for row in rows]
    expected = [AdaptiveHaltingOptions(0.6, 0.1, 0.75).probability_at(s, 12) for s in range(12)]
    assert probabilities == pytest.approx(expected)
    changes = [r for r in metrics(tiny.reference) if r.get("event") == "recursion"]
    assert [(r["step"], r["H_cycles"], r["L_cycles"]) for r in changes] == [
        (0, 1, 1),
        (3, 2, 1),
        (6, 2, 2),
    ]


def test_without_the_plugins_rows_record_the_specs_values(tiny, tmp_path):
    assert _run(tiny.plain, tmp_path / "run", "--max-steps", "2") == 0
    rows = _train_rows(tmp_path / "run")
    assert {(r["H_cycles"], r["L_cycles"], r["halt_exploration_prob"]) for r in rows} == {
        (2, 2, 0.5)
    }


def test_the_checkpoint_records_the_depth_in_force(tiny):
    payload = torch.load(
        tiny.reference / "checkpoints" / "step-00000012.pt", map_location="cpu", weights_only=True
    )
    assert payload["recursion"] == {
        "H_cycles": 2,
        "L_cycles": 2,
        "halt_exploration_prob": pytest.approx(0.1),
    }
    assert payload["spec"]["plugins"]["curriculum"]["schedule"] == "staged"


@pytest.mark.parametrize("split_at", [2, 3, 7])
def test_a_resumed_run_with_both_plugins_ends_bit_identical_to_an_uninterrupted_one(
    tiny, tmp_path, split_at
):
    run_dir = tmp_path / "run"
    assert _run(tiny.spec, run_dir, "--plugins", BOTH, "--max-steps", str(split_at)) == 0
    assert _run(tiny.spec, run_dir, "--plugins", BOTH) == 0
    assert (
        summary(run_dir)["final_weights_sha256"] == summary(tiny.reference)["final_weights_sha256"]
    )
    keys = ("step", "H_cycles", "L_cycles", "halt_exploration_prob", "loss")
    resumed = [{k: r[k] for k in keys} for r in _train_rows(run_dir)]
    assert resumed == [{k: r[k] for k in keys} for r in _train_rows(tiny.reference)]


def test_resume_restores_the_recorded_depth_before_any_plugin_asks(tiny, tmp_path):
    """A checkpoint's depth comes back by itself: resumed without the plugins, the run
    continues at the depth and exploration the checkpoint recorded."""
    run_dir = tmp_path / "run"
    assert _run(tiny.spec, run_dir, "--plugins", BOTH, "--max-steps", "4") == 0
    assert _run(tiny.spec, run_dir, "--max-steps", "5") == 0
    last = _train_rows(run_dir)[-1]
    expected = AdaptiveHaltingOptions(0.6, 0.1, 0.75).probability_at(4, 12)
    assert (last["step"], last["H_cycles"], last["L_cycles"]) == (5, 2, 1)
    assert last["halt_exploration_prob"] == pytest.approx(expected)


def test_schedules_that_keep_the_specs_values_train_bit_identical_to_no_plugins(tiny, tmp_path):
    constant = tmp_path / "constant.toml"
    constant.write_text(
        tiny.plain.read_text()
        + "\n[plugins.curriculum]\nstart_H_cycles = 2\nstart_L_cycles = 2\n"
        + "\n[plugins.adaptive-halting]\nstart_prob = 0.5\nfinal_prob = 0.5\n"
    )
    assert _run(tiny.plain, tmp_path / "plain", "--max-steps", "6") == 0
    assert _run(constant, tmp_path / "constant", "--plugins", BOTH, "--max-steps", "6") == 0
    plain, scheduled = summary(tmp_path / "plain"), summary(tmp_path / "constant")
    assert plain["final_weights_sha256"] == scheduled["final_weights_sha256"]


STAGED = "plugins.curriculum.schedule=staged;"  # ";" separates --set values below
BAD_TABLES = [
    ("schedule-unknown", "plugins.curriculum.schedule=cosine", "plugins.curriculum.schedule"),
    ("start-too-deep", "plugins.curriculum.start_L_cycles=3", "plugins.curriculum.start_L_cycles"),
    ("start-negative", "plugins.curriculum.start_H_cycles=-1", "plugins.curriculum.start_H_cycles"),
    ("start-a-string", 'plugins.curriculum.start_H_cycles="1"', "start_H_cycles"),
    ("end-fraction-zero", "plugins.curriculum.end_fraction=0.0", "plugins.curriculum.end_fraction"),
    ("unknown-key", "plugins.curriculum.start_H=1", "start_H"),
    (
        "stage-too-deep",
        STAGED + "plugins.curriculum.stages=[{until_fraction=0.5,H_cycles=3,L_cycles=1}]",
        "plugins.curriculum.stages[0].H_cycles",
    ),
    (
        "stages-out-of-order",
        STAGED + "plugins.curriculum.stages=[{until_fraction=0.5,H_cycles=1,L_cycles=1},"
        "{until_fraction=0.4,H_cycles=1,L_cycles=1}]",
        "plugins.curriculum.stages[1].until_fraction",
    ),
    (
        "stage-missing-key",
        STAGED + "plugins.curriculum.stages=[{until_fraction=0.5,H_cycles=1}]",
        "L_cycles",
    ),
    ("probability-above-one", "plugins.adaptive-halting.final_prob=1.5", "final_prob"),
    ("end-step-negative", "plugins.adaptive-halting.end_step=-1", "end_step"),
    ("misspelt-plugin", "plugins.curiculum.schedule=linear", "plugins.curiculum"),
    ("not-a-table", "plugins.curriculum=3", "plugins.curriculum"),
]


@pytest.mark.parametrize(
    ("case", "override", "fragment"), BAD_TABLES, ids=[c[0] for c in BAD_TABLES]
)
def test_a_bad_schedule_value_is_one_line_exit_2_before_anything_is_written(
    tiny, tmp_path, cli, case, override, fragment
):
    run_dir = tmp_path / "run"
    sets = [word for text in override.split(";") for word in ("--set", text)]
    result = cli("run", tiny.plain, "--plugins", BOTH, *sets, "--out", run_dir)
    assert_one_line_error(result, fragment)
    assert not (run_dir / "metrics.jsonl").exists()
    assert not (run_dir / "checkpoints").exists()


def test_a_key_of_the_other_schedule_is_refused(tiny, tmp_path, cli):
    result = cli(
        "run",
        tiny.plain,
        "--plugins",
        "curriculum",
        "--set",
        "plugins.curriculum.schedule=staged",
        "--set",
        "plugins.curriculum.start_H_cycles=1",
        "--out",
        tmp_path / "run",
    )
    assert_one_line_error(result, "plugins.curriculum.start_H_cycles", "other schedule")


def test_estimate_checks_the_tables_too(tiny, cli):
    result = cli(
        "estimate", tiny.plain, "--plugins", "curriculum", "--set", "plugins.curriculum.end_step=-2"
    )
    assert_one_line_error(result, "plugins.curriculum.end_step")


def test_a_table_of_a_plugin_switched_off_is_noted_not_used(tiny, tmp_path, cli):
    run_dir = tmp_path / "run"
    result = cli(
        "run", tiny.spec, "--out", run_dir, "--max-steps", "1", "--plugins", "no:curriculum"
    )
    assert result.code == 0, result.err
    assert "[plugins.curriculum] is not used" in result.err
    assert {r["H_cycles"] for r in _train_rows(tmp_path / "run")} == {2}


def test_the_plugin_tables_survive_the_written_spec(tiny):
    from trm.spec import load_spec

    written = load_spec(tiny.reference / "spec.toml")
    assert written.plugins["curriculum"]["stages"][1] == {
        "until_fraction": 0.5,
        "H_cycles": 2,
        "L_cycles": 1,
    }
    assert written.plugins["adaptive-halting"] == {
        "start_prob": 0.6,
        "final_prob": 0.1,
        "end_fraction": 0.75,
    }


# ---------------------------------------------------------------- import contract


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")
def test_a_contrib_plugin_importing_the_model_breaks_a_contract(installed_copy, tmp_path):  # noqa: F811
    tree = tmp_path / "tree"
    shutil.copytree(installed_copy, tree)
    module = tree / "trm" / "contrib" / "curriculum.py"
    module.write_text(module.read_text() + "\nfrom trm.model import TinyRecursiveModel  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    text = " ".join(result.stdout.split())
    assert (
        "Contrib plugins act only through control: never the model or the device layer BROKEN"
        in (text)
    )
    assert "trm.contrib.curriculum -> trm.model" in result.stdout


@pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")
def test_the_contrib_plugins_keep_every_contract(installed_copy):  # noqa: F811
    result = _lint(installed_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contrib plugins act only through control" in " ".join(result.stdout.split())


# ---------------------------------------------------------------- benchmarks/learning.py


def _learning_benchmark():
    import importlib.util

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(benchmarks) not in sys.path:  # as when run as a script: its helpers import by name
        sys.path.insert(0, str(benchmarks))
    path = benchmarks / "learning.py"
    spec = importlib.util.spec_from_file_location("learning_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_fits_a_curriculums_steps_to_a_wall_clock_budget():
    learning = _learning_benchmark()
    options = CurriculumOptions(schedule="staged")  # (1, 2) to 30%, (2, 4) to 60%, then (3, 6)

    def depth_of(step, total):
        return options.depth_at(step, total, (3, 6))[0]

    seconds = {(1, 2): 0.1, (2, 4): 0.25, (3, 6): 0.5}
    steps = learning.steps_for_budget(depth_of, 100.0, seconds.__getitem__)
    assert learning.schedule_time_s(depth_of, steps, seconds.__getitem__) <= 100.0
    assert learning.schedule_time_s(depth_of, steps + 1, seconds.__getitem__) > 100.0
    constant = learning.steps_for_budget(lambda s, t: (3, 6), 100.0, seconds.__getitem__)
    assert constant == 200 and steps > constant


def test_the_benchmark_reads_times_to_accuracy_from_the_metrics_rows():
    learning = _learning_benchmark()
    rows = [
        {"step": 1, "samples_per_s": 64.0},
        {"step": 2, "samples_per_s": 32.0},
        {"kind": "eval", "step": 2, "exact_accuracy": 0.6, "cell_accuracy": 0.9},
        {"kind": "event", "step": 2, "event": "recursion"},
        {"step": 3, "samples_per_s": 128.0},
        {"kind": "eval", "step": 3, "exact_accuracy": 0.95, "cell_accuracy": 0.99},
    ]
    curve = learning.learning_curve(rows, global_batch=64)
    assert [(p["step"], p["train_s"]) for p in curve] == [(2, 3.0), (3, 3.5)]
    assert learning.time_to(curve, 0.5) == 3.0
    assert learning.time_to(curve, 0.9) == 3.5
    assert learning.time_to(curve, 0.99) is None


@pytest.mark.slow
def test_the_benchmark_runs_each_configuration_and_seed_and_reports_them(tiny, tmp_path, capsys):
    learning = _learning_benchmark()
    staged = "staged|curriculum|plugins.curriculum.schedule=staged"
    args = [str(tiny.plain), "--config", "base", "--config", staged, "--steps", "4"]
    args += ["--seeds", "0,1"]
    args += ["--evals", "2", "--targets", "0.0,1.0", "--out", str(tmp_path), "--json"]
    assert learning.main(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert [c["label"] for c in document["configs"]] == ["base", "staged"]
    for config in document["configs"]:
        assert [run["seed"] for run in config["runs"]] == [0, 1]
        assert all(run["steps"] == 4 for run in config["runs"])
        assert config["summary"]["time_to"]["0.0"]["reached"] == 2
        assert config["summary"]["time_to"]["1.0"]["reached"] <= 2
    rows = [r for r in metrics(tmp_path / "runs" / "staged-seed1") if "kind" not in r]
    options = CurriculumOptions(schedule="staged")
    expected = [options.depth_at(step, 4, (2, 2))[0] for step in range(4)]
    assert [(r["H_cycles"], r["L_cycles"]) for r in rows] == expected == [(1, 1)] * 2 + [(2, 2)] * 2


def test_the_shipped_laptop_recipe_loads_and_its_data_options_are_valid():
    from trm.contrib.curriculum import read_options as curriculum_options
    from trm.plugins.tasks.sudoku.source import SudokuBuildOptions, validate_options
    from trm.spec import load_spec, resolve_spec_path, structure_strict

    spec = load_spec(resolve_spec_path("sudoku9-laptop"))
    options = structure_strict(spec.data.generate, SudokuBuildOptions, "spec", "data.generate")
    validate_options(options)
    assert (options.size, options.clues) == (9, 30)
    assert spec.train.max_steps > 0 and spec.train.eval_interval > 0
    assert curriculum_options(spec).schedule == "staged"  # the measured recipe's schedule


def test_the_loop_caps_a_depth_deeper_than_the_spec_and_says_so_once(tmp_path):
    from trm.loop.requests import apply_recursion_requests
    from trm.metrics_log import Journal, MetricsLog
    from trm.spec import RunSpec

    model, _ = _tiny_model()  # the spec's depth: (2, 3)
    spec = RunSpec(arch=model.arch)
    state = SimpleNamespace(spec=spec, model=model, step=4)
    lines: list[str] = []
    journal = Journal(MetricsLog(tmp_path / "metrics.jsonl"), lines.append)
    control = TrainControl()
    with journal.metrics:
        control.set_recursion_depth(1, 1, "shallow")
        apply_recursion_requests(state, control, journal)
        for _ in range(3):  # asked again and again: one change, one message
            control.set_recursion_depth(5, 9, "too deep")
            apply_recursion_requests(state, control, journal)
    assert (model.H_cycles, model.L_cycles) == (2, 3)
    events = [r for r in metrics(tmp_path) if r.get("event") == "recursion"]
    assert [(e["H_cycles"], e["L_cycles"], e["capped"]) for e in events] == [
        (1, 1, False),
        (2, 3, True),
    ]
    assert len(lines) == 2 and "capped" in lines[1]


def test_eval_rebuilds_a_checkpoint_at_the_depth_it_was_trained_with(tiny, tmp_path):
    from trm.restore import restore_model

    run_dir = tmp_path / "run"
    assert _run(tiny.spec, run_dir, "--plugins", BOTH, "--max-steps", "4") == 0
    path = run_dir / "checkpoints" / "step-00000004.pt"
    payload = torch.load(path, map_location="cpu", weights_only=True)
    _spec, model = restore_model(payload, torch.device("cpu"))
    assert (model.H_cycles, model.L_cycles) == (2, 1)  # stage 2; the spec's depth is (2, 2)
    payload.pop("recursion")  # a checkpoint written before the depth was recorded
    _spec, model = restore_model(payload, torch.device("cpu"))
    assert (model.H_cycles, model.L_cycles) == (2, 2)
