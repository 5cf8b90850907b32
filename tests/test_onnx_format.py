"""``trm export MODEL --format onnx``: the solver with every supervision step unrolled, run by
``trm solve`` and ``trm.load`` with onnxruntime and without torch, giving the answers of the
torch path on fresh puzzles; and the bad input around it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import trm
from tests.conftest import assert_one_line_error
from trm.cli.main import main
from trm.plugins.formats.onnx_export import loop_operators
from trm.plugins.tasks.sudoku.generator import generate_many
from trm.shipped import shipped_dir, shipped_manifest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

# Fresh puzzles: the shipped models trained on seed 0 and were scored on seed 1.
FRESH_SEED = 7
PUZZLES = 20
# A 4x4 puzzle with a unique solution, and one of another size.
QUICKSTART_PUZZLE = "1.3...1..1...4.1"
NINE_BY_NINE = "." * 81
# How near 0 a halting logit may lie for bf16's rounding (8 bits of mantissa) to move it
# across: the logits are of order 1-10.
BF16_HALT_MARGIN = 0.25


def fresh_puzzles(name: str, count: int, seed: int) -> list[str]:
    """Puzzles of the shipped model's first manifest kind, generated from ``seed``."""
    options = shipped_manifest(name).kinds[0].options
    questions, _ = generate_many(
        count,
        int(options["size"]),
        int(options["clues"]),
        seed=seed,
        workers=1,
        min_clues=int(options["min_clues"]),
        minimal=float(options["minimal"]),
    )
    return ["".join(str(d) if d else "." for d in q.ravel()) for q in questions]


def export(name: str, out: Path) -> dict:
    """``trm export NAME --format onnx --out OUT --json``'s document."""
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["export", name, "--format", "onnx", "--out", str(out), "--json"]) == 0
    return json.loads(printed.getvalue())


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("onnx")
    folder = base / "quickstart-onnx"
    return SimpleNamespace(base=base, folder=folder, document=export("quickstart", folder))


def assert_same_answers(name: str, folder: Path, seed: int) -> None:
    """Every fresh puzzle gets the torch path's answer, verdicts and text. The halting step
    is the torch path's too, except where the torch path runs in bf16 (the shipped 9x9
    model on a CPU) and the fp32 halting logit at the earlier of the two steps lies within
    bf16's rounding of the threshold 0."""
    model, solver = trm.load(name), trm.load(folder)
    assert type(solver).__name__ == "OnnxSolver"
    for puzzle in fresh_puzzles(name, PUZZLES, seed):
        theirs, ours = model.solve(puzzle), solver.solve(puzzle)
        assert ours.tokens.tolist() == theirs.tokens.tolist(), puzzle
        assert (ours.answer, ours.valid) == (theirs.answer, theirs.valid)
        if ours.steps != theirs.steps:
            assert model.runtime.precision != "fp32", (puzzle, ours.steps, theirs.steps)
            q_halt = ours.step_q_halt[min(ours.steps, theirs.steps) - 1]
            assert abs(q_halt) < BF16_HALT_MARGIN, (puzzle, ours.steps, theirs.steps, q_halt)
        else:
            assert ours.document().items() >= theirs.document().items()


def test_the_quickstart_solver_answers_fresh_puzzles_as_the_torch_path(quickstart):
    assert_same_answers("quickstart", quickstart.folder, FRESH_SEED)


@pytest.mark.slow
def test_the_sudoku9_laptop_solver_answers_fresh_puzzles_as_the_torch_path(tmp_path):
    folder = tmp_path / "s9"
    assert export("sudoku9-laptop", folder)["steps"] == 8
    assert loop_operators(folder / "model.onnx") == []
    assert_same_answers("sudoku9-laptop", folder, FRESH_SEED)


def test_the_graph_unrolls_every_step_with_no_loop_operator(quickstart):
    import onnx

    graph = onnx.load(str(quickstart.folder / "model.onnx")).graph
    ops = {node.op_type for node in graph.node}
    assert not ops & {"Loop", "Scan", "If"}
    assert loop_operators(quickstart.folder / "model.onnx") == []
    card = json.loads((quickstart.folder / "trm-onnx.json").read_text(encoding="utf-8"))
    steps = shipped_manifest("quickstart")  # the manifest checks the shipped file
    assert steps.name == "quickstart"
    # every step has its ArgMax: the steps are in the graph, not repeated by a runtime loop
    assert sum(node.op_type == "ArgMax" for node in graph.node) == card["steps"] == 4
    assert [i.name for i in graph.input] == ["inputs", "puzzle_identifiers"]
    assert [o.name for o in graph.output] == ["answers", "q_halt", "q_continue"]
    batch = graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param and not batch.dim_value  # a dynamic batch axis


def test_the_card_holds_what_a_page_needs_to_encode_and_decode(quickstart):
    card = json.loads((quickstart.folder / "trm-onnx.json").read_text(encoding="utf-8"))
    assert (card["format"], card["version"], card["task"]) == ("trm-onnx", 1, "sudoku")
    assert (card["seq_len"], card["steps"], card["grid"]["rows"], card["grid"]["cols"]) == (
        16,
        4,
        4,
        4,
    )
    assert card["vocab"]["blank"] == 1 and card["vocab"]["digits"] == {
        "1": 2,
        "2": 3,
        "3": 4,
        "4": 5,
    }
    assert card["opset"] >= 17 and card["exported_with"]["torch"] == torch.__version__
    assert card["tested_runtime"]["onnxruntime"]
    assert card["model"]["name"] == "quickstart" and card["model"]["source"] == "quickstart"
    assert card["halt_rule"] == "q_halt > 0"


def test_trm_solve_of_the_folder_prints_what_trm_solve_of_the_model_prints(quickstart, cli):
    theirs = cli("solve", "quickstart", QUICKSTART_PUZZLE)
    ours = cli("solve", quickstart.folder, QUICKSTART_PUZZLE)
    assert theirs.code == ours.code == 0
    assert ours.out == theirs.out
    assert "ONNX, onnxruntime" in ours.err
    by_file = cli("solve", quickstart.folder / "model.onnx", QUICKSTART_PUZZLE)
    assert by_file.out == theirs.out


def test_solve_json_carries_every_steps_answer_and_q_halt(quickstart, cli):
    theirs = json.loads(cli("solve", "quickstart", QUICKSTART_PUZZLE, "--json").out)
    ours = json.loads(cli("solve", quickstart.folder, QUICKSTART_PUZZLE, "--json").out)
    assert {k: ours[k] for k in theirs} == theirs
    assert len(ours["step_answers"]) == len(ours["step_q_halt"]) == 4
    assert ours["step_answers"][-1] == ours["answer"]
    assert ours["step_answer_cells"][-1] == ours["answer_cells"]
    first_halt = next((i + 1 for i, q in enumerate(ours["step_q_halt"]) if q > 0), 4)
    assert ours["steps"] == first_halt


def test_the_solve_path_and_trm_load_import_no_torch(quickstart):
    script = (
        "import sys\n"
        "from trm.cli.main import main\n"
        f"assert main(['solve', {str(quickstart.folder)!r}, {QUICKSTART_PUZZLE!r}]) == 0\n"
        "import trm\n"
        f"solver = trm.load({str(quickstart.folder)!r})\n"
        f"assert solver.solve({QUICKSTART_PUZZLE!r}).valid\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('no torch')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("no torch\n")
    assert "model's answer:" in done.stdout


def test_a_puzzle_of_the_wrong_size_is_one_line_naming_the_size(quickstart, cli):
    result = cli("solve", quickstart.folder, NINE_BY_NINE)
    assert_one_line_error(result, "quickstart solves 4x4 Sudoku (16 cells)")
    assert result.err.splitlines()[-1] == cli("solve", "quickstart", NINE_BY_NINE).err.strip()
    with pytest.raises(trm.TrmError, match="4x4 Sudoku"):
        trm.load(quickstart.folder).solve(NINE_BY_NINE)


def test_a_folder_without_its_card_is_one_line(quickstart, cli, tmp_path):
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "model.onnx").write_bytes((quickstart.folder / "model.onnx").read_bytes())
    assert_one_line_error(cli("solve", lone, QUICKSTART_PUZZLE), "no trm-onnx.json")
    assert_one_line_error(cli("solve", lone / "model.onnx", QUICKSTART_PUZZLE), "trm-onnx.json")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda card: card.pop("seq_len"), "lacks the field 'seq_len'"),
        (lambda card: card.update(steps=0), "steps is 0"),
        (lambda card: card.update(format="other"), "not a trm ONNX solver's card"),
        (lambda card: card.update(version=99), "card version 99"),
        (lambda card: card.update(halt_rule="sometimes"), "halt_rule"),
        (lambda card: card.update(task="nonesuch"), "task 'nonesuch'"),
    ],
)
def test_a_damaged_card_is_one_line_naming_the_field(quickstart, cli, tmp_path, change, fragment):
    folder = tmp_path / "damaged"
    folder.mkdir()
    card = json.loads((quickstart.folder / "trm-onnx.json").read_text(encoding="utf-8"))
    change(card)
    (folder / "trm-onnx.json").write_text(json.dumps(card), encoding="utf-8")
    (folder / "model.onnx").write_bytes((quickstart.folder / "model.onnx").read_bytes())
    assert_one_line_error(cli("solve", folder, QUICKSTART_PUZZLE), fragment)


def test_a_damaged_graph_is_one_line(quickstart, cli, tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "trm-onnx.json").write_bytes((quickstart.folder / "trm-onnx.json").read_bytes())
    (folder / "model.onnx").write_bytes(b"not a protobuf")
    assert_one_line_error(cli("solve", folder, QUICKSTART_PUZZLE), "cannot be read by onnxruntime")


def test_the_torch_paths_options_and_commands_are_refused_in_one_line(quickstart, cli):
    assert_one_line_error(
        cli("solve", quickstart.folder, QUICKSTART_PUZZLE, "--attempts", "2"),
        "--attempts 2",
        "plain trajectory",
    )
    assert_one_line_error(cli("eval", quickstart.folder), "is an ONNX solver")


def test_a_model_the_format_cannot_express_is_refused_before_writing(cli, tmp_path):
    payload = torch.load(shipped_dir() / "quickstart.pt", weights_only=True)
    payload["mix_layout"] = {"tasks": []}
    mixed = tmp_path / "mixed.pt"
    torch.save(payload, mixed)
    out = tmp_path / "out"
    assert_one_line_error(
        cli("export", mixed, "--format", "onnx", "--out", out), "multi-task mix", "nothing"
    )
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.pt"]


def test_export_json_names_the_file_its_size_and_the_check(quickstart):
    document = quickstart.document
    assert document["model_bytes"] == (quickstart.folder / "model.onnx").stat().st_size
    assert document["probe_equal"] == document["probe_rows"]
    assert document["steps"] == 4 and document["opset"] >= 17


def test_run_rows_answers_a_batch_as_one_puzzle_at_a_time(quickstart):
    solver = trm.load(quickstart.folder)
    puzzles = fresh_puzzles("quickstart", 5, FRESH_SEED + 1)
    rows = np.stack([solver.solve(p).question for p in puzzles])
    answers, q_halt, _ = solver.run_rows(rows)
    assert answers.shape == (4, 5, 16) and q_halt.shape == (4, 5)
    for i, puzzle in enumerate(puzzles):
        assert answers[-1, i].tolist() == solver.solve(puzzle).tokens.tolist()


@pytest.mark.slow
def test_a_checkpoint_file_exports_and_answers_as_its_model(tmp_path, cli):
    checkpoint = shipped_dir() / "quickstart.pt"  # a checkpoint file, given by its path
    document = export(str(checkpoint), tmp_path / "from-file")
    card = json.loads((tmp_path / "from-file" / "trm-onnx.json").read_text(encoding="utf-8"))
    assert card["model"]["source"] == str(checkpoint) and card["model"]["puzzle"] is None
    assert document["probe_equal"] == document["probe_rows"]
    theirs = cli("solve", checkpoint, QUICKSTART_PUZZLE)
    assert cli("solve", tmp_path / "from-file", QUICKSTART_PUZZLE).out == theirs.out
