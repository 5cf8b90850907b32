"""``--explore N`` / ``--noise`` / ``--select`` / ``--explore-seed`` at ``trm solve``, ``trm
eval``, ``Model.solve`` and ``train.eval_explore``: one trajectory gives exactly the plain
answers; more report each trajectory (solve) or the oracle and the per-N figures (eval) and
the cost; the same command gives the same answers; exploration composes with ``--attempts``;
bad values are one-line errors. Also the ``--attempts`` bound and lazy draws, the
seed checks of ``Model.solve`` and a folder given as the puzzle text."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import trm
from tests.conftest import assert_one_line_error
from tests.tiny_run import build_tiny_data, metrics, write_spec
from trm.cli.main import main
from trm.data.selection import find_selection_rule
from trm.errors import TrmError
from trm.evaluation.attempts import plan_attempts
from trm.evaluation.explore import DEFAULT_NOISE, plan_exploration, task_noise
from trm.plan.dataset import data_sources
from trm.plugin_manager import load_plugins
from trm.spec.schema import TrainSpec

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
PUZZLE = "1... .... ..4. ...."
QUICKSTART_PUZZLE = "1.....3..4.....2"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A tiny 4x4 Sudoku run of a few steps, evaluated with 3 trajectories (halt-first)."""
    base = tmp_path_factory.mktemp("explore_tiny")
    data = build_tiny_data(base / "data")
    spec = write_spec(
        base, data, max_steps=5, eval_interval=5, eval_explore=3, eval_select="halt-first"
    )
    assert main(["run", str(spec), "--out", str(base / "run")]) == 0
    newest = sorted(glob.glob(str(base / "run" / "checkpoints" / "step-*.pt")))[-1]
    return SimpleNamespace(base=base, spec=spec, run=base / "run", checkpoint=Path(newest))


def untimed(out: str) -> dict:
    document = json.loads(out)
    document.pop("seconds_per_puzzle", None)
    return document


def test_one_trajectory_gives_exactly_the_plain_answers_and_figures(tiny, cli):
    plain = cli("solve", tiny.run, PUZZLE, "--json")
    once = cli("solve", tiny.run, PUZZLE, "--json", "--explore", "1", "--noise", "0.7")
    assert plain.code == once.code == 0 and once.out == plain.out
    model = trm.load(tiny.run)
    assert model.solve(PUZZLE, explore=1).document() == model.solve(PUZZLE).document()
    plain = cli("eval", tiny.run, "--json")
    once = cli("eval", tiny.run, "--json", "--explore", "1")
    assert plain.code == once.code == 0 and untimed(once.out) == untimed(plain.out)
    assert json.loads(plain.out)["trajectories_per_puzzle"] == 1.0


def test_solve_reports_each_trajectory_and_the_same_command_gives_the_same(tiny, cli):
    args = ("solve", tiny.run, PUZZLE, "--json", "--explore", "5", "--noise", "0.5")
    first, second = cli(*args), cli(*args)
    assert first.code == 0, first.err
    assert first.out == second.out
    trajectories = json.loads(first.out)["trajectories"]
    assert len(trajectories) == 5
    assert sum(t["chosen"] for t in trajectories) == 1
    chosen = next(t for t in trajectories if t["chosen"])
    # Sudoku's default rule: the first trajectory the rules accept, else the highest Q
    valid = [t for t in trajectories if t["valid"]]
    if valid:
        assert chosen is valid[0]
    else:
        assert chosen["q_halt"] == max(t["q_halt"] for t in trajectories)
    assert all(1 <= t["halt_step"] <= 16 for t in trajectories)
    other_seed = cli(*args, "--explore-seed", "7")
    assert json.loads(other_seed.out)["trajectories"] != trajectories
    text = cli("solve", tiny.run, PUZZLE, "--explore", "5")
    assert "explored: 5 trajectories" in text.out


def test_eval_reports_the_oracle_the_per_n_figures_and_the_cost(tiny, cli):
    result = cli("eval", tiny.run, "--json", "--explore", "4", "--noise", "0.5")
    assert result.code == 0, result.err
    figures = json.loads(result.out)
    assert figures["explore"] == 4 and figures["select"] == "rules"  # Sudoku's default
    assert figures["trajectories_per_puzzle"] == 4.0
    assert figures["seconds_per_puzzle"] > 0
    assert figures["oracle_exact_accuracy"] >= figures["exact_accuracy"]
    assert figures["explore@4/rules"] == figures["exact_accuracy"]
    for n in (1, 2, 4):
        assert {f"explore@{n}/{r}" for r in ("q", "halt-first", "rules", "vote", "oracle")} <= set(
            figures
        )
        assert figures[f"explore@{n}/oracle"] >= figures[f"explore@{n}/rules"]
    text = cli("eval", tiny.run, "--explore", "4").out
    assert "4 trajectories a puzzle" in text and "oracle" in text and "s a puzzle" in text


def test_exploration_composes_with_attempts(tiny, cli):
    result = cli("eval", tiny.run, "--json", "--explore", "2", "--attempts", "3")
    assert result.code == 0, result.err
    figures = json.loads(result.out)
    assert figures["exact_accuracy@3"] >= figures["exact_accuracy"]
    assert figures["trajectories_per_puzzle"] >= 2.0
    solved = cli("solve", tiny.run, PUZZLE, "--json", "--explore", "2", "--attempts", "3")
    assert solved.code == 0, solved.err
    assert json.loads(solved.out)["attempts"] == 3


def test_evaluation_during_training_explores_with_the_spec_keys(tiny):
    (row,) = [r for r in metrics(tiny.run) if r.get("kind") == "eval"]
    assert row["trajectories_per_puzzle"] == 3.0
    assert row["oracle_exact_accuracy"] >= row["exact_accuracy"]
    assert row["explore@3/halt-first"] == row["exact_accuracy"]  # eval_select = halt-first


def _exploration_lines(out_dir: Path) -> dict[str, int]:
    """The lines of exploration.png's panels by label (plots.json), and their points."""
    manifest = json.loads((out_dir / "plots.json").read_text(encoding="utf-8"))
    (plot,) = [p for p in manifest if p["file"] == "exploration.png"]
    return {line["label"]: line["points"] for panel in plot["panels"] for line in panel["lines"]}


def test_report_of_an_explored_run_draws_accuracy_against_trajectories(tiny, cli, tmp_path):
    out = tmp_path / "report"
    result = cli("report", tiny.run, "--out", out, "--json")
    assert result.code == 0, result.err
    assert "exploration.png" in json.loads(result.out)["plots"]
    rules = {"q", "halt-first", "rules", "vote", "oracle"}
    assert _exploration_lines(out) == {rule: 3 for rule in rules}  # N = 1, 2, 3
    task_plot = [p for p in json.loads((out / "plots.json").read_text()) if "task" in p["file"]]
    drawn = {line["label"] for p in task_plot for panel in p["panels"] for line in panel["lines"]}
    assert not {label for label in drawn if "explore@" in label or "oracle" in label}


def test_report_of_a_saved_evaluation_draws_its_curve(tiny, cli, tmp_path):
    evaluated = cli("eval", tiny.run, "--json", "--explore", "4", "--select", "vote")
    assert evaluated.code == 0, evaluated.err
    saved = tmp_path / "eval.json"
    saved.write_text(evaluated.out, encoding="utf-8")
    result = cli("report", saved, "--json")
    assert result.code == 0, result.err
    out = tmp_path / "eval-report"
    assert sorted(p.name for p in out.iterdir()) == [
        "exploration.png", "index.html", "plots.json", "report.json",
    ]  # fmt: skip
    assert _exploration_lines(out) == {r: 3 for r in ("q", "halt-first", "rules", "vote", "oracle")}
    assert json.loads(result.out)["evaluation"]["select"] == "vote"
    assert "chosen by vote" in (out / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("not json {", ["is not JSON"]),
        ('{"runs": []}', ["not a document of `trm eval --json`"]),
        ('{"explore": 1, "exact_accuracy": 0.5}', ["no exploration figures", "--explore N"]),
    ],
)
def test_report_refuses_a_file_that_is_no_explored_evaluation(cli, tmp_path, text, fragments):
    saved = tmp_path / "eval.json"
    saved.write_text(text, encoding="utf-8")
    assert_one_line_error(cli("report", saved), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]  # nothing written


def test_shipped_evaluation_carries_each_kinds_curve():
    command = ["eval", "quickstart", "--max-examples", "4", "--explore", "2", "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "trm", *command],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    for kind in json.loads(result.stdout)["kinds"]:
        assert {f"explore@{n}/{r}" for n in (1, 2) for r in ("q", "rules", "oracle")} <= set(kind)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--explore", "0"], ["--explore", "at least 1"]),
        (["--explore", "1025"], ["--explore", "1024"]),
        (["--explore", "two"], ["--explore", "whole number"]),
        (["--noise", "-1"], ["--noise", "between 0"]),
        (["--noise", "nan"], ["--noise", "between 0"]),
        (["--noise", "loud"], ["--noise"]),
        (["--explore", "2", "--select", "best"], ["--select", "best", "halt-first"]),
        (["--explore-seed", "-3"], ["--explore-seed"]),
        (["--attempts", "1025"], ["--attempts", "1024"]),
    ],
)
@pytest.mark.parametrize("command", ["solve", "eval"])
def test_bad_exploration_options_are_one_line_errors(tiny, cli, command, args, fragments):
    where = [tiny.run, PUZZLE] if command == "solve" else [tiny.run]
    assert_one_line_error(cli(command, *where, *args), *fragments)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("eval_select", "best", "train.eval_select"),
        ("eval_explore", 0, "train.eval_explore"),
        ("eval_noise", -0.5, "train.eval_noise"),
    ],
)
def test_bad_exploration_spec_keys_are_refused_before_anything_is_written(
    tiny, cli, tmp_path, key, value, fragment
):
    data = tiny.base / "data"
    spec = write_spec(tmp_path / "spec", data, max_steps=2, **{key: value})
    out = tmp_path / "run"
    assert_one_line_error(cli("run", spec, "--out", out), fragment)
    assert not out.exists()


def test_model_solve_refuses_bad_exploration_values(tiny):
    model = trm.load(tiny.run)
    for kwargs in (
        {"explore": 0},
        {"explore": 2.5},
        {"noise": "x"},
        {"noise": float("inf")},
        {"explore": 2, "select": "nope"},
        {"explore_seed": -1},
    ):
        with pytest.raises(TrmError):
            model.solve(PUZZLE, **kwargs)


def test_rules_selection_is_refused_for_a_task_whose_rules_cannot_judge_answers():
    pm = load_plugins(())

    class LookedUp:
        name = "looked-up"
        rules_judge_answers = False

        def check_answer(self, question, answer):
            return False

    with pytest.raises(TrmError, match="--select rules: the looked-up task has no rules"):
        find_selection_rule(pm, "rules", LookedUp(), "--select")
    assert find_selection_rule(pm, None, LookedUp(), "--select").name == "q"


def test_each_task_has_its_measured_default_rule_and_noise():
    """Sudoku's default rule and the default noise are the ones
    benchmarks/results/explore_sudoku9_laptop_minimal_choose.json chose, the maze's rule the
    one benchmarks/results/explore_maze_small_choose.json chose (docs/test-time.md); ARC, whose
    measured model solves no task, keeps q; a run's eval_noise defaults to the commands'
    noise."""
    pm = load_plugins(())
    sources = data_sources(pm)
    assert find_selection_rule(pm, None, sources["sudoku"], "--select").name == "rules"
    assert find_selection_rule(pm, None, sources["maze"], "--select").name == "rules"
    assert find_selection_rule(pm, None, sources["arc"], "--select").name == "q"
    maze = json.loads((RESULTS / "explore_maze_small_choose.json").read_text(encoding="utf-8"))
    for noise in maze["noise"]:
        at = {s["rule"]: s for s in maze["summaries"] if s["noise"] == noise}
        assert set(at) == {"q", "halt-first", "rules", "vote"}
        assert at["rules"]["optimal_path_rate"] == max(s["optimal_path_rate"] for s in at.values())
        if noise >= 0.1:
            assert at["rules"]["exact_accuracy"] == max(s["exact_accuracy"] for s in at.values())
    # the maze's noise: the scale where its rule scored best on other mazes
    noise_doc = json.loads((RESULTS / "explore_maze_small_noise.json").read_text(encoding="utf-8"))
    rules = [s for s in noise_doc["summaries"] if s["rule"] == "rules"]
    best = max(rules, key=lambda s: (s["exact_accuracy"], s["optimal_path_rate"]))
    assert best["noise"] == task_noise(sources["maze"], None) == 1.0
    assert task_noise(sources["sudoku"], None) == task_noise(sources["arc"], None) == DEFAULT_NOISE


def test_a_noise_not_given_is_the_tasks_and_a_given_one_is_kept():
    pm = load_plugins(())
    sources = data_sources(pm)
    assert plan_exploration(pm, sources["maze"], 4, None, None, 0).noise == 1.0
    assert plan_exploration(pm, sources["sudoku"], 4, None, None, 0).noise == DEFAULT_NOISE
    assert plan_exploration(pm, sources["maze"], 4, 0.2, None, 0).noise == 0.2
    assert plan_exploration(pm, sources["maze"], 1, None, None, 0).noise == 1.0
    choose = json.loads(
        (RESULTS / "explore_sudoku9_laptop_minimal_choose.json").read_text(encoding="utf-8")
    )
    at_16 = {(r["noise"], r["rule"]): r["exact"] for r in choose["rows"] if r["trajectories"] == 16}
    rules_first = (at_16[(n, "rules")] >= at_16[(n, r)] for n, r in at_16 if r != "oracle")
    assert all(rules_first)
    best_q = max((exact, noise) for (noise, rule), exact in at_16.items() if rule == "q")[1]
    assert best_q == DEFAULT_NOISE
    assert TrainSpec().eval_noise == DEFAULT_NOISE


# ------------------------------------------------------------------ attempts, seeds, folders


def _run_bounded(code: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run ``code`` in a child process; a hang (today's main draws 10⁹ symmetries up front)
    fails the test through the timeout instead of exhausting this process's memory."""
    try:
        return subprocess.run(code, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{code[:4]} did not answer within {timeout_s:.0f} s")


@pytest.mark.parametrize("command", ["solve", "eval"])
def test_a_billion_attempts_is_a_one_line_error_at_once(command):
    where = ["quickstart", QUICKSTART_PUZZLE] if command == "solve" else ["quickstart"]
    result = _run_bounded(
        [sys.executable, "-m", "trm", command, *where, "--attempts", "1000000000"], 240
    )
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("trm: error:")]
    assert len(lines) == 1 and "--attempts" in lines[0] and "1024" in lines[0]
    assert "Traceback" not in result.stderr


def test_model_solve_with_a_billion_attempts_raises_at_once():
    code = (
        "import trm\n"
        "from trm.errors import TrmError\n"
        "m = trm.load('quickstart')\n"
        "try:\n"
        f"    m.solve({QUICKSTART_PUZZLE!r}, attempts=10**9)\n"
        "except TrmError as exc:\n"
        "    print('TrmError', exc)\n"
    )
    result = _run_bounded([sys.executable, "-c", code], 240)
    assert result.stdout.startswith("TrmError attempts must be at most 1024"), result.stderr


@pytest.mark.parametrize("seed", [-1, "x", 1.5])
def test_model_solve_refuses_a_bad_attempts_seed(tiny, seed):
    model = trm.load(tiny.run)
    with pytest.raises(TrmError, match="attempts_seed"):
        model.solve(PUZZLE, attempts=2, attempts_seed=seed)
    with pytest.raises(TrmError, match="attempts_seed"):
        model.solve(PUZZLE, attempts_seed=seed)


def test_model_solve_of_an_existing_folder_says_it_is_a_folder(tiny, tmp_path):
    folder = tmp_path / "puzzles"
    folder.mkdir()
    model = trm.load(tiny.run)
    with pytest.raises(TrmError, match="is a folder") as caught:
        model.solve(str(folder))
    assert "does not exist" not in str(caught.value)


def test_symmetries_are_drawn_only_when_an_answer_is_refused():
    asked: list[int] = []

    class Counting:
        name = "counting"

        def answer_symmetries(self, seq_len, count, rng):
            from trm.data.symmetry import CellSymmetry

            asked.append(count)
            cells = np.arange(seq_len)
            return [CellSymmetry(np.roll(cells, 1), np.arange(2)) for _ in range(count)]

        def check_answer(self, question, answer):
            return True

    plan = plan_attempts(Counting(), 4, 1024, 0, "--attempts")
    assert asked == [1]  # only the check that the shape has symmetries
    assert len(plan.symmetries) == 1023 and asked == [1, 1023]


def test_without_the_selection_plugin_one_trajectory_still_answers(tiny, cli):
    plain = cli("solve", tiny.run, PUZZLE, "--json")
    off = cli("solve", tiny.run, PUZZLE, "--json", "--plugins", "no:selection")
    assert off.code == 0 and off.out == plain.out
    refused = cli("solve", tiny.run, PUZZLE, "--explore", "2", "--plugins", "no:selection")
    assert_one_line_error(refused, "--select", "no plugin offers one")
