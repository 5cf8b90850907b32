"""Multi-task mixing: the shared layout, weighted task sampling, per-task metrics, solving
each task of a mixed model, the leak refusal and bad ``[[data.mix]]`` tables."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import trm
from tests.conftest import assert_one_line_error
from tests.tiny_run import metrics, summary
from trm.data.mix_layout import plan_layout, read_layout
from trm.data.mix_sampler import MixSampler
from trm.data.puzzle_dataset import (
    PuzzleDatasetMetadata,
    open_split,
    write_identifiers,
    write_split,
)
from trm.data.sampler import SplitIndex
from trm.errors import TrmError
from trm.evaluation.per_task import combine
from trm.spec import load_spec

MODEL = """\
name = "tinymix"

[arch]
hidden_size = 16
expansion = 2.0
num_heads = 2
L_layers = 1
H_cycles = 1
L_cycles = 1
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 0
puzzle_emb_len = 1
halt_max_steps = 2

[train]
global_batch_size = 16
max_steps = 6
lr = 1e-3
lr_warmup_steps = 1
eval_interval = 3
eval_max_examples = 8
checkpoint_interval_steps = 3
seed = 5

[runtime]
device = "cpu"
precision = "fp32"
threads = 1
"""

SUDOKU = """
[[data.mix]]
name = "sudoku4"
source = "sudoku"
weight = {sudoku_weight}

[data.mix.generate]
size = 4
count = 48
test_count = 12
clues = 8
workers = 1
"""

MAZE = """
[[data.mix]]
name = "maze"
source = "maze"
weight = 1.0

[data.mix.generate]
preset = ""
size = 5
min_walls = 1
max_walls = 4
min_path = 2
count = 48
test_count = 12
workers = 1
"""


def write_mix_spec(folder: Path, sudoku_weight: float = 3.0, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tinymix.toml"
    text = MODEL + extra + SUDOKU.format(sudoku_weight=sudoku_weight) + MAZE
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """A tiny mixed run (4x4 Sudoku weight 3, 5x5 mazes weight 1), six steps."""
    from trm.cli.main import main

    base = tmp_path_factory.mktemp("mix")
    spec = write_mix_spec(base)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    return SimpleNamespace(base=base, spec=spec, run_dir=run_dir, data=run_dir / "data")


# ---------------------------------------------------------------- the layout


def test_mixed_dataset_pads_rows_and_offsets_tokens_and_identifiers(mixed_run):
    layout = read_layout(mixed_run.data)
    sudoku, maze = layout.tasks
    assert (sudoku.seq_len, maze.seq_len, layout.seq_len) == (16, 25, 25)
    assert sudoku.token_offset == 1
    assert maze.token_offset == 1 + sudoku.vocab_size - 1  # after the sudoku tokens, pad shared
    assert layout.vocab_size == 1 + (sudoku.vocab_size - 1) + (maze.vocab_size - 1)
    assert maze.identifier_offset == sudoku.num_puzzle_identifiers
    split = open_split(mixed_run.data / "train")
    assert split.metadata.seq_len == 25 and split.metadata.vocab_size == layout.vocab_size
    assert list(split.sets) == ["sudoku4", "maze"]
    own = open_split(Path(sudoku.data_dir) / "train").sets["all"]
    mixed = split.sets["sudoku4"]
    assert (np.asarray(mixed.inputs)[:, 16:] == 0).all()  # padded with the shared pad
    assert (np.asarray(mixed.labels)[:, 16:] == 0).all()  # ... and the shared ignore label
    back = layout.from_mixed("sudoku4", np.asarray(mixed.inputs))
    assert np.array_equal(back, np.asarray(own.inputs))
    sudoku_tokens = set(np.unique(np.asarray(mixed.inputs)[:, :16])) - {0}
    maze_tokens = set(np.unique(np.asarray(split.sets["maze"].inputs))) - {0}
    assert sudoku_tokens and maze_tokens and not sudoku_tokens & maze_tokens
    assert max(sudoku_tokens) < maze.token_offset <= min(maze_tokens)
    maze_ids = np.asarray(split.sets["maze"].puzzle_identifiers)
    assert (maze_ids >= maze.identifier_offset).all()
    assert (np.asarray(mixed.puzzle_identifiers) < maze.identifier_offset).all()


def test_layout_maps_tokens_in_and_out_around_each_pad():
    layout = plan_layout(
        [
            dict(name="a", source="s", weight=1.0, seq_len=3, vocab_size=4, pad_id=0,
                 ignore_label_id=0, num_puzzle_identifiers=2),
            dict(name="b", source="t", weight=1.0, seq_len=2, vocab_size=3, pad_id=2,
                 ignore_label_id=None, num_puzzle_identifiers=1),
        ]
    )  # fmt: skip
    assert layout.vocab_size == 1 + 3 + 2 and layout.num_puzzle_identifiers == 3
    assert layout.to_mixed("a", np.array([0, 1, 3])).tolist() == [0, 1, 3]
    assert layout.to_mixed("b", np.array([0, 2])).tolist() == [4, 0, 0]  # its pad 2 -> 0
    assert layout.from_mixed("b", np.array([4, 5, 0])).tolist() == [0, 1]
    assert layout.from_mixed("b", np.array([1, 0, 0])).tolist() == [2, 2]  # a's token -> pad
    with pytest.raises(TrmError, match="--task c"):
        layout.task("c")


# ---------------------------------------------------------------- sampling


def test_weighted_sampling_follows_weights_and_is_a_function_of_seed_and_step(mixed_run):
    index = SplitIndex(open_split(mixed_run.data / "train"))
    first = MixSampler(index, np.array([3.0, 1.0]), 16, seed=5)
    rows = np.concatenate([first.examples_for_step(s) for s in range(200)])
    sudoku_share = np.mean(rows < index.set_example_offset[1])
    assert 0.72 < sudoku_share < 0.78  # weight 3 of 4
    again = MixSampler(index, np.array([3.0, 1.0]), 16, seed=5)
    assert np.array_equal(again.examples_for_step(150), first.examples_for_step(150))
    other = MixSampler(index, np.array([3.0, 1.0]), 16, seed=6)
    assert not np.array_equal(other.examples_for_step(150), first.examples_for_step(150))
    # each task's rows walk through its own epochs: every sudoku puzzle once per epoch
    sudoku_rows = rows[rows < index.set_example_offset[1]]
    assert sorted(sudoku_rows[:48]) == list(range(48))


def test_each_steps_draw_is_found_without_the_steps_before_it(mixed_run):
    index = SplitIndex(open_split(mixed_run.data / "train"))
    weights = np.array([3.0, 1.0])
    # chunks of two steps, so that the walk crosses many chunks
    walked = MixSampler(index, weights, 16, seed=5, max_chunk_rows=64)
    assert walked.chunk_steps == 2
    draws = [walked._draw(s) for s in range(41)]
    for (start, counts), (following, _) in itertools.pairwise(draws):
        assert counts.sum() == 16 and (counts >= 0).all()
        assert np.array_equal(start + counts, following)  # each task's stream, without gaps
    for step in (40, 7, 0, 33):  # a resume at any step, in any order, reads the same rows
        fresh = MixSampler(index, weights, 16, seed=5, max_chunk_rows=64)
        assert np.array_equal(fresh._draw(step)[0], draws[step][0])
        assert np.array_equal(fresh.examples_for_step(step), walked.examples_for_step(step))
    # the default chunk holds every step of a run this size: the same draw law, other draws
    whole = MixSampler(index, weights, 16, seed=5)
    assert whole.chunk_steps * 16 < 10**9 <= 2 * whole.chunk_steps * 16
    assert np.array_equal(whole._draw(12_345_678)[0], whole._draw(12_345_678)[0])


def test_the_mix_samplers_memory_does_not_grow_with_the_steps(mixed_run):
    import tracemalloc

    index = SplitIndex(open_split(mixed_run.data / "train"))
    sampler = MixSampler(index, np.array([3.0, 1.0]), 16, seed=5)
    sampler.examples_for_step(1_000)  # the tasks' epoch orders cached
    tracemalloc.start()
    try:
        sampler.examples_for_step(1_001)
        before = tracemalloc.get_traced_memory()[0]
        for step in range(1_002, 6_002):
            sampler.rows_per_task(step)
        sampler.examples_for_step(6_002)
        grown_bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown_bytes < 64 * 1024  # one array a step kept would be 5,000 of ~100 bytes


def test_resumed_mixed_run_matches_an_uninterrupted_one(mixed_run, tmp_path):
    from trm.cli.main import main

    stopped = tmp_path / "stopped"
    assert main(["run", str(mixed_run.spec), "--out", str(stopped), "--max-steps", "3"]) == 0
    assert main(["run", str(mixed_run.spec), "--out", str(stopped)]) == 0
    whole = summary(mixed_run.run_dir)["final_weights_sha256"]
    assert summary(stopped)["final_weights_sha256"] == whole


def test_a_streamed_mix_trains_on_the_same_rows_as_one_in_memory(mixed_run, tmp_path):
    from trm.cli.main import main

    streamed = tmp_path / "streamed"
    args = ["run", str(mixed_run.spec), "--out", str(streamed), "--set", "data.reader=stream"]
    assert main(args) == 0
    whole = summary(mixed_run.run_dir)["final_weights_sha256"]
    assert summary(streamed)["final_weights_sha256"] == whole


# ---------------------------------------------------------------- per-task metrics


def test_every_train_and_eval_row_and_the_summary_show_each_task(mixed_run):
    rows = metrics(mixed_run.run_dir)
    steps = [r for r in rows if "kind" not in r]
    assert all("train_exact_accuracy/sudoku4" in r and "halted/maze" in r for r in steps)
    evals = [r for r in rows if r.get("kind") == "eval"]
    assert evals
    for row in evals:
        assert row["examples/sudoku4"] == 8 and row["examples/maze"] == 8
        assert "valid_path_rate/maze" in row  # the maze's own metric, in its own encoding
        mean = (row["exact_accuracy/sudoku4"] + row["exact_accuracy/maze"]) / 2
        assert row["exact_accuracy"] == pytest.approx(mean)
    tasks = summary(mixed_run.run_dir)["final_tasks"]
    assert set(tasks) == {"sudoku4", "maze"}
    assert tasks["maze"]["exact_accuracy"] == evals[-1]["exact_accuracy/maze"]


def test_overall_figures_weigh_each_task_by_its_examples():
    result = combine(
        {
            "a": dict(examples=30, exact_accuracy=1.0, cell_accuracy=1.0, loss=0.0,
                      mean_halt_steps=1.0, q_halt_accuracy=1.0),
            "b": dict(examples=10, exact_accuracy=0.0, cell_accuracy=0.5, loss=4.0,
                      mean_halt_steps=3.0, q_halt_accuracy=0.0, valid_path_rate=0.2),
        }
    )  # fmt: skip
    assert result["examples"] == 40
    assert result["exact_accuracy"] == pytest.approx(0.75)
    assert result["loss"] == pytest.approx(1.0)
    assert result["valid_path_rate/b"] == 0.2 and "valid_path_rate" not in result


# ---------------------------------------------------------------- bad tables


@pytest.mark.parametrize(
    ("name", "extra", "weight", "fragment"),
    [
        ("weight-zero", "", 0.0, "data.mix[0].weight"),
        ("weight-negative", "", -1.0, "data.mix[0].weight"),
        ("source-too", '[data]\nsource = "sudoku"\n', 1.0, "remove data.source"),
        ("dir-too", '[data]\ndir = "/tmp"\n', 1.0, "names a dataset as well"),
    ],
)
def test_bad_mix_tables_are_one_line_errors(cli, tmp_path, name, extra, weight, fragment):
    spec = write_mix_spec(tmp_path, sudoku_weight=weight, extra=extra)
    result = cli("run", spec, "--out", tmp_path / "run")
    assert_one_line_error(result, "data.mix", fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        ("bogus = 3", "unknown key(s) bogus in [data.mix[1].generate]"),
        ("min_walls = 400", "data.mix[1].generate.min_walls and max_walls must satisfy"),
    ],
)
def test_a_bad_generate_option_of_the_last_table_builds_nothing_and_leaves_nothing(
    cli, tmp_path, option, fragment
):
    spec = write_mix_spec(tmp_path)
    text = spec.read_text().replace("min_walls = 1\n", f"min_walls = 1\n{option}\n")
    spec.write_text(text.replace("min_walls = 1\nmin_walls = 400", "min_walls = 400"))
    given = tmp_path / "given"
    given.mkdir()
    result = cli("run", spec, "--out", given)
    assert_one_line_error(result, fragment)
    assert "building" not in result.err  # the Sudoku table before it was not built either
    assert list(given.iterdir()) == []  # no data-mix/, no .lock
    assert_one_line_error(cli("run", spec, "--out", tmp_path / "new"), fragment)
    assert not (tmp_path / "new").exists()


def test_a_table_whose_dir_holds_another_sources_dataset_is_refused(cli, mixed_run, tmp_path):
    maze = mixed_run.run_dir / "data-mix" / "maze" / "data"
    sudoku = mixed_run.run_dir / "data-mix" / "sudoku4" / "data"
    spec = tmp_path / "dirs.toml"
    tables = "".join(
        f'\n[[data.mix]]\nname = "{name}"\nsource = "{source}"\ndir = "{folder}"\n'
        for name, source, folder in (("s", "sudoku", maze), ("m", "maze", maze))
    )
    spec.write_text(MODEL + tables)
    result = cli("run", spec, "--out", tmp_path / "run")
    assert_one_line_error(
        result, f"data.mix[0].dir: {maze} does not hold sudoku puzzles", "data.mix[0].source"
    )
    assert not (tmp_path / "run").exists()
    swapped = spec.read_text().replace(f'"maze"\ndir = "{maze}"', f'"maze"\ndir = "{sudoku}"')
    spec.write_text(swapped.replace(f'"sudoku"\ndir = "{maze}"', f'"sudoku"\ndir = "{sudoku}"'))
    result = cli("run", spec, "--out", tmp_path / "run")
    assert_one_line_error(result, f"data.mix[1].dir: {sudoku} does not hold maze puzzles")
    assert not (tmp_path / "run").exists()


def test_an_empty_or_single_mix_is_refused(cli, tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text(MODEL + "[data]\nmix = []\n")
    assert_one_line_error(cli("run", empty, "--out", tmp_path / "r1"), "data.mix", "empty")
    single = tmp_path / "single.toml"
    single.write_text(MODEL + MAZE)
    assert_one_line_error(cli("run", single, "--out", tmp_path / "r2"), "at least two")
    twice = tmp_path / "twice.toml"
    twice.write_text(MODEL + MAZE + MAZE)
    assert_one_line_error(cli("run", twice, "--out", tmp_path / "r3"), "distinct name")
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r3").exists()


def test_a_mix_spec_reads_back_equal_and_a_single_spec_has_no_mix_key(tmp_path):
    from trm.spec import spec_from_dict, spec_to_dict

    spec = load_spec(write_mix_spec(tmp_path))
    assert spec.data.is_mix and [e.task for e in spec.data.mix] == ["sudoku4", "maze"]
    assert spec_from_dict(spec_to_dict(spec), "x") == spec
    single = load_spec(Path(__file__).resolve().parents[1] / "specs" / "quickstart.toml")
    assert "mix" not in spec_to_dict(single)["data"]


# ---------------------------------------------------------------- the leak


def _arc_like(root: Path, train_tasks: list[str], test_tasks: list[str]) -> Path:
    """A tiny dataset whose identifiers name ARC-style task versions ("id|||t1|||…")."""
    names = ["<blank>"] + [f"{t}|||t0|||0123456789" for t in train_tasks]
    write_identifiers(root, names)
    for split, tasks in (("train", train_tasks), ("test", test_tasks)):
        ids = np.array([names.index(f"{t}|||t0|||0123456789") for t in tasks], dtype=np.int32)
        n = len(ids)
        meta = PuzzleDatasetMetadata(
            seq_len=4, vocab_size=12, pad_id=0, ignore_label_id=0, blank_identifier_id=0,
            num_puzzle_identifiers=len(names), total_groups=n, mean_puzzle_examples=1.0,
            total_puzzles=n, sets=("all",),
        )  # fmt: skip
        arrays = {
            "inputs": np.full((n, 4), 2, dtype=np.uint8),
            "labels": np.full((n, 4), 3, dtype=np.uint8),
            "puzzle_identifiers": ids,
            "puzzle_indices": np.arange(n + 1),
            "group_indices": np.arange(n + 1),
        }
        write_split(root / split, meta, {"all": arrays})
    return root


def _dir_mix(tmp_path: Path, first: Path, second: Path) -> Path:
    spec = tmp_path / "arcmix.toml"
    tables = "".join(
        f'\n[[data.mix]]\nname = "{name}"\nsource = "arc"\ndir = "{folder}"\n'
        for name, folder in (("first", first), ("second", second))
    )
    spec.write_text(MODEL + tables)
    return spec


def test_a_mix_whose_training_set_holds_the_others_test_tasks_is_refused(cli, tmp_path):
    # like ARC-AGI-1 (its evaluation tasks e1, e2 held out) and ARC-AGI-2 (which trains on them)
    agi1 = _arc_like(tmp_path / "one", ["t1", "e1", "e2"], ["e1", "e2"])
    agi2 = _arc_like(tmp_path / "two", ["t1", "e1", "e2", "n1"], ["n1"])
    result = cli("run", _dir_mix(tmp_path, agi1, agi2), "--out", tmp_path / "run")
    assert_one_line_error(result, "data.mix:", "second trains on 2 of first's held-out", "e1")
    assert not (tmp_path / "run").exists()


def test_a_mix_of_datasets_sharing_only_their_test_tasks_is_accepted(tmp_path):
    from trm.plan.mix import check_no_leak

    one = _arc_like(tmp_path / "one", ["t1", "e1"], ["e1"])
    two = _arc_like(tmp_path / "two", ["t2", "e1"], ["e1"])  # e1 held out in both: no leak
    spec = load_spec(_dir_mix(tmp_path, one, two))
    check_no_leak(["first", "second"], [one, two], spec.data)


def test_a_leak_is_found_by_identifiers_whatever_the_datasets_are_called(tmp_path):
    from trm.plan.mix import check_no_leak

    one = _arc_like(tmp_path / "sudoku", ["a", "b"], ["b"])
    two = _arc_like(tmp_path / "maze", ["b", "c"], ["c"])
    spec = load_spec(_dir_mix(tmp_path, one, two))
    with pytest.raises(TrmError, match=r"data\.mix: second trains on 1 of first's"):
        check_no_leak(["first", "second"], [one, two], spec.data)


def test_the_mix_record_names_each_tasks_dataset(mixed_run):
    record = json.loads((mixed_run.data / "build.json").read_text())
    assert [m["name"] for m in record["mix"]] == ["sudoku4", "maze"]


# ---------------------------------------------------------------- solve and eval per task


def _first_test_row(layout, name: str) -> np.ndarray:
    own = open_split(Path(layout.task(name).data_dir) / "test").sets["all"]
    return np.asarray(own.inputs[0], dtype=np.int64)


def test_solve_maps_each_tasks_puzzle_into_the_mix_and_its_answer_back(mixed_run):
    import torch

    import trm
    from trm.evaluation.evaluate import predict

    model = trm.load(mixed_run.run_dir)
    layout = model.layout
    for name in layout.names:
        question = _first_test_row(layout, name)
        text = model.for_task(name).source.format_grid(question)
        solution = model.solve(text)  # the task is the only one whose source reads it
        assert np.array_equal(solution.question, question)
        placement = model.runtime.placement()
        row = layout.to_mixed(name, question)[None, :]
        batch = placement.to_device(
            {
                "inputs": row,
                "labels": row,
                "puzzle_identifiers": np.full(1, layout.task(name).identifier_offset),
            }
        )
        with torch.no_grad():
            raw = predict(model.module, batch, model.spec.arch.halt_max_steps, placement)
        expected = layout.from_mixed(name, raw[0].cpu().numpy())
        assert np.array_equal(solution.tokens, expected)
        assert solution.tokens.shape == (layout.task(name).seq_len,)
        assert model.solve(text, task=name).tokens.tolist() == expected.tolist()


def test_solve_names_the_tasks_when_the_puzzle_is_none_of_them(cli, mixed_run):
    result = cli("solve", mixed_run.run_dir, "12")
    assert_one_line_error(result, "sudoku4, maze", "--task")
    result = cli("solve", mixed_run.run_dir, "12", "--task", "chess")
    assert_one_line_error(result, "--task chess", "sudoku4, maze")


def test_eval_of_a_mixed_model_scores_each_task_as_its_run_did(cli, mixed_run):
    result = cli("eval", mixed_run.run_dir, "--max-examples", "8", "--json")
    assert result.code == 0, result.err
    scored = json.loads(result.out)
    last = [r for r in metrics(mixed_run.run_dir) if r.get("kind") == "eval"][-1]
    for key in ("exact_accuracy/sudoku4", "cell_accuracy/maze", "valid_path_rate/maze"):
        assert scored[key] == pytest.approx(last[key])
    only = json.loads(cli("eval", mixed_run.run_dir, "--task", "maze", "--json").out)
    assert only["tasks"] == ["maze"] and "exact_accuracy/sudoku4" not in only
    assert only["examples"] == only["examples/maze"] == 12


def test_the_report_shows_each_task_of_a_mixed_run(mixed_run, tmp_path):
    from trm.plugins.report.build import make_report

    report = make_report([mixed_run.run_dir], tmp_path / "report")
    tasks = report.document["runs"][0]["tasks"]
    last = [r for r in metrics(mixed_run.run_dir) if r.get("kind") == "eval"][-1]
    assert tasks["maze"]["exact_accuracy"] == last["exact_accuracy/maze"]
    assert set(tasks) == {"sudoku4", "maze"}
    assert "Each task" in (tmp_path / "report" / "index.html").read_text()


@pytest.mark.parametrize(
    ("tables", "fragment"),
    [
        ([{"weight": 1.0}, {"source": "maze"}], "data.mix[0].source: name the task's data"),
        ([{"source": "sudoku", "wieght": 2}, {"source": "maze"}], "wieght in [data.mix[0]]"),
        ([{"source": "sudoku", "weight": float("inf")}, {"source": "maze"}], "finite number"),
        (
            [{"source": "sudoku", "dir": "/d", "generate": {"size": 4}}, {"source": "maze"}],
            "not both",
        ),
        ([{"source": "sudoku", "name": "a/b"}, {"source": "maze"}], "data.mix[0].name"),
        ([{"source": "mix"}, {"source": "maze"}], "data.mix[0].source"),
    ],
)
def test_each_bad_mix_table_is_named_in_one_message(tables, fragment):
    from trm.spec import spec_from_dict

    with pytest.raises(TrmError) as refused:
        spec_from_dict({"data": {"mix": tables}}, "spec.toml")
    assert fragment in str(refused.value) and "\n" not in str(refused.value)


def test_attempts_are_refused_for_a_mix_in_one_line(cli, mixed_run, tmp_path):
    result = cli("run", mixed_run.spec, "--out", tmp_path / "run", "--set", "train.eval_attempts=2")
    assert_one_line_error(result, "train.eval_attempts", "[[data.mix]]")
    assert not (tmp_path / "run").exists()
    text = "1... .... ..3. .4.."
    result = cli("solve", mixed_run.run_dir, text, "--task", "sudoku4", "--attempts", "2")
    assert_one_line_error(result, "--attempts 2", "mix")
    result = cli("eval", mixed_run.run_dir, "--attempts", "2")
    assert_one_line_error(result, "--attempts 2", "mix")


def test_exploration_is_refused_for_a_mix_in_one_line(cli, mixed_run, tmp_path):
    result = cli("run", mixed_run.spec, "--out", tmp_path / "run", "--set", "train.eval_explore=2")
    assert_one_line_error(result, "train.eval_explore", "[[data.mix]]")
    assert not (tmp_path / "run").exists()
    text = "1... .... ..3. .4.."
    for task in ((), ("--task", "sudoku4")):
        result = cli("solve", mixed_run.run_dir, text, *task, "--explore", "2")
        assert_one_line_error(result, "--explore 2", "mix")
    result = cli("eval", mixed_run.run_dir, "--explore", "2")
    assert_one_line_error(result, "--explore 2", "mix")
    with pytest.raises(TrmError, match="--explore 2"):
        trm.load(mixed_run.run_dir).solve(text, explore=2)


def test_a_mixed_model_exported_as_a_model_folder_solves_each_task_as_its_run(
    cli, mixed_run, tmp_path
):
    import trm

    folder = tmp_path / "hf"
    assert cli("export", str(mixed_run.run_dir), "--format", "hf", "--out", str(folder)).code == 0
    run_model, folder_model = trm.load(mixed_run.run_dir), trm.load(folder)
    assert folder_model.layout is not None
    assert folder_model.layout.names == run_model.layout.names
    for name in run_model.layout.names:
        text = run_model.for_task(name).source.format_grid(_first_test_row(run_model.layout, name))
        assert folder_model.solve(text).tokens.tolist() == run_model.solve(text).tokens.tolist()
