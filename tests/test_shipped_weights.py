"""Shipped models (``trm.weights``, ``trm.shipped``): each file matches its manifest and loads
with ``weights_only=True``; ``trm solve NAME`` and ``trm eval NAME`` use them with no run
directory; bad names, wrong-size puzzles and tampered files are one line; the reducer keeps
inference exact; benchmarks/shipped_weights.py ships a finished run that ``trm eval NAME``
then reproduces."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import attrs
import numpy as np
import pytest
import torch

import trm
from tests.conftest import assert_one_line_error
from tests.tiny_run import SPEC
from trm.cli.main import main
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.device.contract import HOST, Placement
from trm.errors import TrmError
from trm.evaluation.evaluate import predict_with_halt
from trm.plugin_manager import load_plugins
from trm.plugins.evaluation.held_out import kind_options
from trm.restore import SHIPPED_KEYS, reduce_checkpoint, restore_model
from trm.shipped import (
    SHIPPED_DIR_ENV,
    file_sha256,
    read_manifest,
    shipped_checkpoint,
    shipped_dir,
    shipped_manifest,
    shipped_names,
)
from trm.spec import apply_overrides, load_spec, resolve_spec_path

REPO = Path(__file__).resolve().parent.parent
# A 4x4 puzzle of 6 clues that the shipped quickstart model solves (checked below).
QUICKSTART_PUZZLE = "1...|..3.|.2..|...4"
# Keys of a run's checkpoint that a shipped one must not carry (training state, machine paths).
TRAINING_ONLY = ("optimizers", "carry", "rng", "data_position", "data_dir", "ranks")


def _copy_of_shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the package's shipped models that trm reads instead (TRM_SHIPPED_DIR)."""
    folder = tmp_path / "weights"
    shutil.copytree(shipped_dir(), folder, ignore=shutil.ignore_patterns("__*"))
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(folder))
    return folder


# --- the shipped files ------------------------------------------------------------------


def test_quickstart_is_shipped():
    assert "quickstart" in shipped_names()


@pytest.mark.parametrize("name", shipped_names())
def test_each_shipped_file_matches_its_manifest_and_loads_weights_only(name):
    folder = shipped_dir()
    path = folder / f"{name}.pt"
    manifest = read_manifest(folder / f"{name}.json")
    assert manifest.name == name
    assert file_sha256(path) == manifest.sha256
    assert path.stat().st_size == manifest.size_bytes
    assert manifest.size_bytes < 8_000_000  # a few MB at most
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert set(payload) <= {*SHIPPED_KEYS, "ema"}
    assert not set(payload) & set(TRAINING_ONLY)
    assert payload["ema"] is None
    spec, model = restore_model(payload, torch.device("cpu"))
    assert not model.training
    assert manifest.seed == spec.train.seed
    assert manifest.checkpoint_step == payload["step"] <= manifest.steps
    assert manifest.kinds, "a manifest records at least one held-out kind"
    for kind in manifest.kinds:
        assert kind.source == spec.data.source
        assert kind.count > 0
        assert 0.0 <= kind.exact_accuracy <= kind.cell_accuracy <= 1.0


@pytest.mark.parametrize("name", shipped_names())
def test_each_manifest_reports_fresh_puzzles_first_not_the_split_its_checkpoint_was_chosen_on(
    name,
):
    manifest = shipped_manifest(name)
    fresh = manifest.kinds[0]
    assert fresh.seed != manifest.seed  # another build seed: puzzles the run never saw
    for kind in manifest.kinds:
        if kind.seed == manifest.seed:  # the run's own held-out split says what it is
            assert "chosen on" in kind.kind


# --- trm solve NAME / trm eval NAME --------------------------------------------------------


def test_solve_quickstart_answers_with_no_run_directory(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder called quickstart here
    result = cli("solve", "quickstart", QUICKSTART_PUZZLE, "--json")
    assert result.code == 0, result.err
    answer = json.loads(result.out)
    assert answer["valid"] is True
    assert len(answer["answer"]) == 16
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_path_that_exists_wins_over_a_shipped_name(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").mkdir()  # an (empty) run directory of that name
    result = cli("solve", "quickstart", QUICKSTART_PUZZLE)
    assert_one_line_error(result, "no checkpoint found at quickstart")


@pytest.mark.parametrize("command", ["solve", "eval"])
def test_an_unknown_name_is_one_line_listing_the_shipped_models(cli, command):
    args = [command, "sudoku-nonesuch"] + ([QUICKSTART_PUZZLE] if command == "solve" else [])
    result = cli(*args)
    assert_one_line_error(
        result, "unknown model sudoku-nonesuch", "shipped models: " + ", ".join(shipped_names())
    )


def test_a_puzzle_of_the_wrong_size_names_the_size_the_model_solves(cli):
    result = cli("solve", "quickstart", "." * 81)
    assert_one_line_error(result, "quickstart solves 4x4 Sudoku (16 cells)", "81 cells")


# --- trm.load(NAME) ---------------------------------------------------------------------


def test_load_by_name_gives_the_shipped_model_that_solves_a_4x4_puzzle(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder called quickstart here
    model = trm.load("quickstart")
    assert model.checkpoint == shipped_dir() / "quickstart.pt"
    assert model.manifest == shipped_manifest("quickstart")
    solution = model.solve(QUICKSTART_PUZZLE)
    assert solution.valid is True
    assert sum(ch.isdigit() for ch in solution.answer) == 16
    assert 1 <= solution.steps <= solution.max_steps
    assert not any(tmp_path.iterdir())  # nothing written


def test_load_of_an_unknown_name_raises_the_error_listing_the_shipped_models():
    with pytest.raises(TrmError) as caught:
        trm.load("sudoku-nonesuch")
    message = str(caught.value)
    assert "unknown model sudoku-nonesuch" in message
    assert "shipped models: " + ", ".join(shipped_names()) in message
    assert "\n" not in message


def test_model_solve_of_a_wrong_size_puzzle_names_the_size_the_shipped_model_solves():
    model = trm.load("quickstart")
    with pytest.raises(TrmError, match=r"^quickstart solves 4x4 Sudoku \(16 cells\): .*81 cells"):
        model.solve("." * 81)


def test_a_missing_path_that_is_not_a_name_says_what_may_be_given(tmp_path):
    with pytest.raises(TrmError, match="does not exist; give a checkpoint file, a run dir or a"):
        trm.load(tmp_path / "none.pt")


def test_a_tampered_shipped_file_is_one_line(cli, tmp_path, monkeypatch):
    folder = _copy_of_shipped(tmp_path, monkeypatch)
    path = folder / "quickstart.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    for args in (["solve", "quickstart", QUICKSTART_PUZZLE], ["eval", "quickstart"]):
        result = cli(*args)
        assert_one_line_error(result, "shipped model quickstart", "SHA-256", "damaged")
    with pytest.raises(TrmError, match="SHA-256"):
        shipped_checkpoint("quickstart")


def test_a_manifest_with_an_unknown_key_is_one_line(cli, tmp_path, monkeypatch):
    folder = _copy_of_shipped(tmp_path, monkeypatch)
    manifest = folder / "quickstart.json"
    document = json.loads(manifest.read_text())
    document["accuracy"] = 1.0
    manifest.write_text(json.dumps(document))
    result = cli("solve", "quickstart", QUICKSTART_PUZZLE)
    assert_one_line_error(result, "manifest", "quickstart.json", "accuracy")


# The shipped model whose manifest also records its figures with 8 attempts: its `trm eval`
# (minutes on 2 cores) is tested in tests/test_shipped_weights_at_8.py, a file of its own so
# that under pytest -n (--dist loadfile) another worker runs the other models' below.
AT_8 = "sudoku9-laptop"


def assert_eval_reproduces_the_manifest(name: str, document: dict) -> None:
    """``document``, the JSON of ``trm eval NAME``, scores the manifest's kinds in its order,
    each on the manifest's count of puzzles, beside the manifest's figure and within 2 points
    of it."""
    manifest = shipped_manifest(name)
    assert document["model"] == name
    assert [row["kind"] for row in document["kinds"]] == [k.kind for k in manifest.kinds]
    for row, kind in zip(document["kinds"], manifest.kinds, strict=True):
        assert row["examples"] == kind.count
        assert row["manifest_exact_accuracy"] == kind.exact_accuracy
        assert abs(row["exact_accuracy"] - kind.exact_accuracy) <= 0.02


@pytest.mark.parametrize("name", [name for name in shipped_names() if name != AT_8])
@pytest.mark.slow
def test_eval_name_reproduces_the_manifest_within_2_points(name, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("eval", name, "--json")
    assert result.code == 0, result.err
    assert_eval_reproduces_the_manifest(name, json.loads(result.out))


@pytest.mark.slow
def test_eval_name_prints_the_manifest_figure_beside_its_own(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    manifest = shipped_manifest("quickstart")
    result = cli("eval", "quickstart", "--max-examples", "50")
    assert result.code == 0, result.err
    assert f"{manifest.kinds[0].exact_accuracy:.2%}" in result.out
    assert f"({manifest.kinds[0].count} in the manifest)" in result.out


def test_the_laptop_manifest_records_each_kind_with_8_attempts_from_its_results_document():
    manifest = shipped_manifest("sudoku9-laptop")
    for kind in manifest.kinds:
        (retried,) = [r for r in kind.retried if r.attempts == 8 and r.attempts_seed == 0]
        assert retried.exact_accuracy_one_attempt == kind.exact_accuracy  # reproduced
        assert retried.exact_accuracy >= retried.exact_accuracy_one_attempt
        assert retried.command.startswith("python benchmarks/attempts.py sudoku9-laptop ")
        document = json.loads((REPO / retried.results).read_text())
        (row,) = [r for r in document["kinds"] if r["kind"] == kind.kind]
        assert row["examples"] == kind.count and document["attempts"] == 8
        assert row["exact_accuracy@8"] == retried.exact_accuracy
        assert row["exact_accuracy"] == retried.exact_accuracy_one_attempt


def test_a_manifest_with_an_impossible_retried_figure_is_one_line(cli, tmp_path, monkeypatch):
    folder = _copy_of_shipped(tmp_path, monkeypatch)
    manifest = folder / "sudoku9-laptop.json"
    document = json.loads(manifest.read_text())
    document["kinds"][0]["retried"][0]["exact_accuracy"] = 1.5
    manifest.write_text(json.dumps(document))
    result = cli("eval", "sudoku9-laptop", "--attempts", "8")
    assert_one_line_error(result, "sudoku9-laptop.json", "retried[0].exact_accuracy", "1.5")


def test_eval_of_a_shipped_name_refuses_split_without_data(cli):
    result = cli("eval", "quickstart", "--split", "train")
    assert_one_line_error(result, "--split needs --data")


# --- the reducer and the regeneration script ---------------------------------------------


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory) -> SimpleNamespace:
    """A tiny finished run that generates its own 4x4 data (as the shipped recipes do)."""
    base = tmp_path_factory.mktemp("shipped")
    spec_text = SPEC.format(global_batch=8, steps=6, eval_interval=3, data_dir="", micro=4).replace(
        'dir = ""\n', ""
    )
    spec_text += (
        "\n[data.generate]\nsize = 4\ncount = 64\ntest_count = 16\nclues = 8\nworkers = 1\n"
    )
    spec = base / "tiny.toml"
    spec.write_text(spec_text)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    return SimpleNamespace(base=base, spec=spec, run=run_dir)


def _rows(run_dir: Path) -> dict[str, torch.Tensor]:
    index = SplitIndex(open_split(run_dir / "data" / "test"))
    rows = index.gather(np.arange(index.num_examples))
    return {key: torch.as_tensor(value) for key, value in rows.items()}


def test_the_reducer_keeps_inference_outputs_identical(generated_run, tmp_path):
    newest = sorted((generated_run.run / "checkpoints").glob("step-*.pt"))[-1]
    full = torch.load(newest, map_location="cpu", weights_only=True)
    assert full["ema"] is not None and full["optimizers"]
    reduced_path = tmp_path / "reduced.pt"
    torch.save(reduce_checkpoint(full), reduced_path)
    reduced = torch.load(reduced_path, map_location="cpu", weights_only=True)
    assert reduced["ema"] is None and not set(reduced) & set(TRAINING_ONLY)
    assert reduced_path.stat().st_size < newest.stat().st_size
    placement = Placement(HOST, torch.device("cpu"))
    batch = _rows(generated_run.run)
    outputs = []
    for payload in (full, reduced):
        spec, model = restore_model(payload, torch.device("cpu"))
        outputs.append(predict_with_halt(model, batch, spec.arch.halt_max_steps, placement))
    assert torch.equal(outputs[0][0], outputs[1][0])
    assert torch.equal(outputs[0][1], outputs[1][1])


def _script() -> ModuleType:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "shipped_weights", REPO / "benchmarks" / "shipped_weights.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


@pytest.mark.slow
def test_the_script_ships_a_finished_run_that_trm_eval_reproduces(
    generated_run, cli, tmp_path, monkeypatch
):
    script = _script()
    recipe = script.ShippedRecipe(
        name="tiny4",
        description="a tiny test model",
        trained_on="64 generated 4x4 puzzles",
        puzzle="4x4 Sudoku (16 cells)",
        run_args=[str(generated_run.spec)],
        kinds=[
            script.KindRecipe("the run's held-out split", count=16),
            script.KindRecipe("7 clues, fresh", {"clues": 7}, seed=11, count=10),
        ],
    )
    out = tmp_path / "out"
    command = f"trm run {generated_run.spec} --out {generated_run.run}"
    manifest = script.ship(recipe, generated_run.run, command, "abc123", out)
    summary = json.loads((generated_run.run / "summary.json").read_text())
    hardware = json.loads((generated_run.run / "hardware.json").read_text())
    assert manifest.command == command
    assert manifest.commit == "abc123"
    assert manifest.steps == summary["steps"]
    assert manifest.wall_s == summary["wall_s"]
    assert manifest.machine.cpu_model == hardware["cpu_model"]
    assert manifest.seed == 3
    assert manifest.sha256 == file_sha256(out / "tiny4.pt")
    assert [k.seed for k in manifest.kinds] == [3, 11]
    assert manifest.kinds[1].options["clues"] == 7
    assert read_manifest(out / "tiny4.json") == manifest
    monkeypatch.setenv(SHIPPED_DIR_ENV, str(out))
    assert shipped_names() == ["tiny4"]
    result = cli("eval", "tiny4", "--json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)["kinds"]
    assert [r["exact_accuracy"] for r in rows] == [k.exact_accuracy for k in manifest.kinds]
    assert [r["cell_accuracy"] for r in rows] == [k.cell_accuracy for k in manifest.kinds]
    assert [r["examples"] for r in rows] == [16, 10]


def _recipe_spec(recipe):
    """The spec the recipe's ``trm run`` trains: its spec file with its ``--set`` values."""
    sets = [
        value
        for flag, value in zip(recipe.run_args[1::2], recipe.run_args[2::2], strict=False)
        if flag == "--set"
    ]
    return apply_overrides(load_spec(resolve_spec_path(recipe.run_args[0])), sets)


@pytest.mark.parametrize("name", sorted(_script().RECIPES))
def test_each_recipe_kind_is_valid_options_of_its_spec(name):
    recipe = _script().RECIPES[name]
    spec = _recipe_spec(recipe)
    pm = load_plugins("")
    for kind in recipe.kinds:
        options = kind_options(pm, spec, kind.overrides, f"kind {kind.name!r}")
        assert kind.count <= options["test_count"]


@pytest.mark.parametrize("name", sorted(_script().RECIPES))
def test_each_recipe_scores_fresh_puzzles_first(name):
    recipe = _script().RECIPES[name]
    spec = _recipe_spec(recipe)
    assert recipe.kinds[0].seed not in (None, spec.train.seed)


def test_rescore_scores_the_shipped_file_again_and_keeps_how_it_was_trained(
    generated_run, tmp_path
):
    script = _script()
    recipe = script.ShippedRecipe(
        name="tiny4",
        description="a tiny test model",
        trained_on="64 generated 4x4 puzzles",
        puzzle="4x4 Sudoku (16 cells)",
        run_args=[str(generated_run.spec)],
        kinds=[script.KindRecipe("the run's held-out split", count=16)],
    )
    out = tmp_path / "out"
    shipped = script.ship(recipe, generated_run.run, "trm run tiny", "abc123", out)
    fresh = script.KindRecipe("7 clues, fresh", {"clues": 7}, seed=11, count=10)
    again = script.rescore(attrs.evolve(recipe, kinds=[fresh, *recipe.kinds]), out)
    assert [k.kind for k in again.kinds] == ["7 clues, fresh", "the run's held-out split"]
    assert again.kinds[1] == shipped.kinds[0]  # the same split scores the same
    assert again.kinds[0].seed == 11 and again.kinds[0].count == 10
    assert attrs.evolve(again, kinds=shipped.kinds) == shipped  # the training record is kept
    assert read_manifest(out / "tiny4.json") == again


@pytest.fixture
def run_script(capsys, monkeypatch):
    """``python benchmarks/shipped_weights.py ARGS…`` run in this process (the script's
    ``main`` with those arguments): returns the exit code, stdout and stderr, as
    ``returncode``, ``stdout`` and ``stderr``."""

    def run(*args: str | Path) -> SimpleNamespace:
        script = _script()
        monkeypatch.setattr(sys, "argv", ["shipped_weights.py", *map(str, args)])
        capsys.readouterr()
        code = script.main()
        captured = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)

    return run


def test_the_script_from_run_records_the_given_command_and_prints_json(
    generated_run, tmp_path, run_script
):
    command = f"trm run {generated_run.spec} --out {generated_run.run}"
    out = tmp_path / "out"
    done = run_script(
        "--only", "quickstart", "--from-run", generated_run.run, "--command", command,
        "--commit", "abc123", "--out", out, "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["command"] == command
    assert model["kinds"][1]["count"] == 16  # the tiny run's whole held-out split
    assert model["sha256"] == file_sha256(out / "quickstart.pt")
    assert read_manifest(out / "quickstart.json").to_json() == model


def test_the_script_rescore_without_only_is_one_line(tmp_path, run_script):
    done = run_script("--rescore", "--out", tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("error:") == 1 and "--rescore needs --only" in done.stderr
    assert not any(tmp_path.iterdir())


def test_the_script_from_run_without_a_command_is_one_line(generated_run, tmp_path, run_script):
    done = run_script("--only", "quickstart", "--from-run", generated_run.run, "--out", tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("error:") == 1 and "--command" in done.stderr
    assert not any(tmp_path.iterdir())


def test_the_manifest_names_the_accelerator_a_run_trained_on():
    device_words = _script().device_words
    hardware = {"accelerators": [{"kind": "cuda", "index": 0, "name": "NVIDIA H200"}]}
    assert device_words("cuda:0", hardware) == "cuda:0 (NVIDIA H200)"
    assert device_words("cuda", hardware) == "cuda (NVIDIA H200)"
    assert device_words("cuda:1", hardware) == "cuda:1"  # no record of GPU 1
    assert device_words("cpu", hardware) == "cpu"
    assert device_words("cpu", {}) == "cpu"


@pytest.mark.parametrize(
    ("field", "value", "fragments"),
    [
        ("seed", -1, ["kinds[0].seed", "-1 is outside"]),
        ("count", 0, ["kinds[0].count", "0 is outside"]),
        ("exact_accuracy", 1.5, ["kinds[0].exact_accuracy", "1.5 is outside"]),
        ("source", "nosuch", ["kinds[0].source", "'nosuch'", "'sudoku'"]),
    ],
)
def test_a_manifest_kind_with_a_bad_value_is_one_line(
    cli, tmp_path, monkeypatch, field, value, fragments
):
    folder = _copy_of_shipped(tmp_path, monkeypatch)
    manifest = folder / "quickstart.json"
    document = json.loads(manifest.read_text())
    document["kinds"][0][field] = value
    manifest.write_text(json.dumps(document))
    for args in (["solve", "quickstart", QUICKSTART_PUZZLE], ["eval", "quickstart"]):
        result = cli(*args)
        assert_one_line_error(result, "manifest", "quickstart.json", *fragments)


NINE_BY_NINE = "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79"


def test_a_shipped_model_solves_without_a_word_about_its_training_device(cli, tmp_path):
    """sudoku9-laptop was trained on a GPU; on another machine that is no news to the user."""
    manifest = read_manifest(shipped_dir() / "sudoku9-laptop.json")
    spec = restore_model(
        torch.load(shipped_dir() / "sudoku9-laptop.pt", weights_only=True), torch.device("cpu")
    )[0]
    assert spec.runtime.device != "cpu" and manifest.machine.device != "cpu"
    result = cli("solve", "sudoku9-laptop", NINE_BY_NINE)
    assert result.code == 0, result.err
    assert "runtime.device" not in result.err and "not available here" not in result.err


def test_solve_json_gives_the_cells_a_script_reads_beside_the_tokens(cli):
    result = cli("solve", "quickstart", QUICKSTART_PUZZLE, "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["question_cells"] == QUICKSTART_PUZZLE.replace("|", "")
    cells = document["answer_cells"]
    assert len(cells) == 16 and cells.isdigit()
    assert cells == "".join(ch for ch in document["answer_text"] if ch.isdigit())
    for kept in ("question", "answer", "question_text", "answer_text", "valid", "steps"):
        assert kept in document
    assert document["answer"] == [int(ch) + 1 for ch in cells]  # tokens: digit + 1
