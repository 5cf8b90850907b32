"""The public Python API (``trm.train``, ``trm.load``, ``trm.estimate``, ``Run``, ``Model``,
``Solution``) does what the commands do: the same training rows as ``trm run``, the same
answer as ``trm solve``, the same estimate as ``trm estimate --json``, the same one-line
errors as TrmError; ``trm.__all__`` lists every name and ``import trm`` stays light.
"""

from __future__ import annotations

import glob
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import trm
from tests.conftest import error_lines
from tests.tiny_run import build_tiny_data, write_spec
from trm.api.arguments import in_python_words
from trm.cli.main import main

# The quickstart, shrunk to seconds: fewer puzzles, one thread, fp32 and no compile so that
# two runs in one process take bit-identical steps.
QUICK = [
    "data.generate.count=256",
    "data.generate.test_count=32",
    "train.eval_interval=2",
    "runtime.device=cpu",
    "runtime.precision=fp32",
    "runtime.threads=1",
    "runtime.compile=off",
]
QUICK_STEPS = 4
# Fields of a metrics row that measure the clock or this process's memory, not training.
NOT_TRAINING = {"samples_per_s", "wall_s", "data_wait_s", "mem_host_mb", "mem_device_mb"}
GOOD_PUZZLE = "1... .... ..4. ...."
API_NAMES = {
    "Estimate", "Model", "Run", "RunSummary", "Solution", "TrainingFailed", "TrmError",
    "__version__", "estimate", "hookimpl", "load", "sweep", "train",
}  # fmt: skip


def _training_content(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in NOT_TRAINING} for row in rows]


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> SimpleNamespace:
    """The shrunk quickstart trained twice for QUICK_STEPS steps: by ``trm run`` and by
    ``trm.train`` with the same settings."""
    base = tmp_path_factory.mktemp("python_api_quick")
    sets = [word for text in QUICK for word in ("--set", text)]
    code = main(
        ["run", "quickstart", *sets, "--max-steps", str(QUICK_STEPS), "--out", str(base / "cli")]
    )
    assert code == 0
    run = trm.train("quickstart", out=base / "api", overrides=QUICK, max_steps=QUICK_STEPS)
    return SimpleNamespace(base=base, cli=base / "cli", run=run)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A tiny 4x4 Sudoku run trained by ``trm run`` (to load and solve)."""
    base = tmp_path_factory.mktemp("python_api_tiny")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data, max_steps=3)
    assert main(["run", str(spec), "--out", str(base / "run")]) == 0
    newest = sorted(glob.glob(str(base / "run" / "checkpoints" / "step-*.pt")))[-1]
    return SimpleNamespace(base=base, spec=spec, run=base / "run", checkpoint=Path(newest))


@pytest.mark.slow
def test_train_writes_the_same_metrics_rows_as_trm_run(quick):
    rows = quick.run.metrics
    with (quick.cli / "metrics.jsonl").open() as lines:
        cli_rows = [json.loads(line) for line in lines]
    assert any(row.get("kind") == "eval" for row in rows)
    assert [r["step"] for r in rows if "kind" not in r] == list(range(1, QUICK_STEPS + 1))
    assert _training_content(rows) == _training_content(cli_rows)


def test_a_run_reports_how_it_ended_and_writes_the_report_trm_report_writes(quick, cli):
    run = quick.run
    assert run.dir == quick.base / "api"
    assert run.stopped == "max_steps" and run.summary["steps"] == QUICK_STEPS
    assert run.summary == json.loads((run.dir / "summary.json").read_text())
    report = run.report(quick.base / "api-report")
    assert (report.out_dir / "index.html").is_file() and report.pngs
    result = cli("report", run.dir, "--out", quick.base / "cli-report", "--json")
    assert result.code == 0, result.err
    from_cli = json.loads(result.out)
    assert report.document["runs"] == from_cli["runs"]
    assert report.document["plots"] == from_cli["plots"]


def test_progress_is_switched_off_by_the_plugins_list(tiny, capsys):
    capsys.readouterr()
    run = trm.train(tiny.spec, out=tiny.base / "quiet", plugins=["no:progress"], max_steps=2)
    assert run.summary["steps"] == 2
    assert "step 2/" not in capsys.readouterr().out
    run = trm.train(tiny.spec, out=tiny.base / "shown", max_steps=2)
    assert "step 2/" in capsys.readouterr().out


def _obeys_sudoku_rules(question: np.ndarray, answer: np.ndarray) -> bool:
    """A 4x4 answer (tokens 2..5 are digits 1..4) keeps the clues and repeats no digit in a
    row, column or 2x2 box: the task's rules, written here independently of the source."""
    grid, clues = answer.reshape(4, 4) - 1, question.reshape(4, 4) - 1
    if grid.min() < 1 or grid.max() > 4 or np.any((clues > 0) & (clues != grid)):
        return False
    groups = [*grid, *grid.T, *(grid[r : r + 2, c : c + 2].ravel() for r in (0, 2) for c in (0, 2))]
    return all(len(set(g.tolist())) == 4 for g in groups)


@pytest.mark.parametrize("where", ["run dir", "checkpoint file"])
def test_a_loaded_model_answers_as_trm_solve_does(tiny, cli, where):
    path = tiny.run if where == "run dir" else tiny.checkpoint
    model = trm.load(path)
    assert model.step == 3 and model.spec.name == "tiny" and model.seq_len == 16
    solution = model.solve(GOOD_PUZZLE)
    result = cli("solve", path, GOOD_PUZZLE, "--json")
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert solution.answer == shown["answer_text"] and solution.puzzle == shown["question_text"]
    assert solution.tokens.tolist() == shown["answer"] and solution.valid is shown["valid"]
    assert len(solution.answer.splitlines()) == 5  # 4 rows and the box rule, as the puzzle
    assert solution.valid is _obeys_sudoku_rules(solution.question, solution.tokens)
    assert 1 <= solution.steps <= solution.max_steps == model.spec.arch.halt_max_steps
    text = cli("solve", path, GOOD_PUZZLE)
    assert text.out == str(solution) + "\n"


def test_valid_is_the_task_rules_verdict_on_the_answer_not_the_models(tiny):
    """A model whose every answer is a correct solution gets valid=True, one that answers a
    broken grid valid=False: the flag follows the answer, not the model's halting head."""
    model = trm.load(tiny.run)
    solved = "1 2 | 3 4\n3 4 | 1 2\n----+----\n2 1 | 4 3\n4 3 | 2 1"
    question = model.source.parse_puzzle("1... .... ..4. ....", 16)
    answer = model.source.parse_puzzle(solved, 16)
    assert model.source.check_answer(question, answer)
    assert _obeys_sudoku_rules(question, answer)
    broken = answer.copy()
    broken[1] = broken[0]
    network = model.module
    for tokens, expected in ((answer, True), (broken, False)):
        model.module = _Answering(network, tokens)
        solution = model.solve("1... .... ..4. ....")
        assert solution.valid is expected and solution.tokens.tolist() == tokens.tolist()


class _Answering:
    """A stand-in for the network that always answers ``tokens`` (and never asks to halt)."""

    def __init__(self, model, tokens: np.ndarray) -> None:
        import torch

        self.model, self.tokens = model, torch.as_tensor(tokens, dtype=torch.long)
        self.config = getattr(model, "config", None)
        self.no_ACT_continue = getattr(model, "no_ACT_continue", True)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def initial_carry(self, batch):
        return self.model.initial_carry(batch)

    def __call__(self, carry, batch):
        import torch

        carry, outputs = self.model(carry, batch)
        logits = torch.nn.functional.one_hot(self.tokens, outputs["logits"].shape[-1]).float()
        q_halt = torch.full_like(outputs["q_halt_logits"], -1.0)
        return carry, {**outputs, "logits": logits[None], "q_halt_logits": q_halt}


def _cli_message(cli, *args: str | Path) -> str:
    result = cli(*args)
    assert result.code == 2, result.err
    (line,) = error_lines(result.err)
    return line.removeprefix("trm: error: ")


def test_bad_input_raises_trm_error_with_the_clis_message_in_python_words(tiny, cli, tmp_path):
    missing = tmp_path / "nowhere" / "run"
    cases = [
        (lambda: trm.load(missing), ("solve", missing, GOOD_PUZZLE)),
        (lambda: trm.load(tiny.base / "data"), ("solve", tiny.base / "data", GOOD_PUZZLE)),
        (lambda: trm.load(tiny.run).solve("1 2 3"), ("solve", tiny.run, "1 2 3")),
        (lambda: trm.train("no-such-spec", out=tmp_path / "a"), ("run", "no-such-spec")),
        (
            lambda: trm.train(tiny.spec, out=tmp_path / "b", overrides=["train.lr=-1"]),
            ("run", tiny.spec, "--out", tmp_path / "b", "--set", "train.lr=-1"),
        ),
        (
            lambda: trm.train(tiny.spec, out=tmp_path / "c", resume=tmp_path / "gone.pt"),
            ("run", tiny.spec, "--out", tmp_path / "c", "--resume", tmp_path / "gone.pt"),
        ),
        (
            lambda: trm.estimate("quickstart", plugins=["no-such-plugin"]),
            ("estimate", "quickstart", "--plugins", "no-such-plugin"),
        ),
    ]
    for call, command in cases:
        with pytest.raises(trm.TrmError) as raised:
            call()
        message = _cli_message(cli, *command)
        assert str(raised.value) == in_python_words(message)
        assert "--" not in str(raised.value)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert not (tmp_path / "c").exists()


def test_wrongly_typed_arguments_are_one_line_errors(tiny, tmp_path):
    with pytest.raises(trm.TrmError, match="plugins takes a list"):
        trm.train(tiny.spec, out=tmp_path / "x", plugins="mkl")
    with pytest.raises(trm.TrmError, match="max_steps must be a whole number"):
        trm.train(tiny.spec, out=tmp_path / "x", max_steps=2.5)
    with pytest.raises(trm.TrmError, match="spec must be"):
        trm.estimate(42)
    with pytest.raises(trm.TrmError, match="the puzzle must be text"):
        trm.load(tiny.run).solve(None)
    calls = {
        "overrides": lambda: trm.train(tiny.spec, out=tmp_path / "x", overrides=5),
        "plugins": lambda: trm.train(tiny.spec, out=tmp_path / "x", plugins=5),
        "out": lambda: trm.train(tiny.spec, out=5),
        "mode": lambda: trm.train(tiny.spec, out=tmp_path / "x", mode=None),
        "load": lambda: trm.load(None),
        "load ": lambda: trm.load(5),
        "overrides ": lambda: trm.estimate("quickstart", overrides=5),
        "out ": lambda: trm.estimate("quickstart", out=5),
        "disable": lambda: trm.train(tiny.spec, out=tmp_path / "x", disable=[3]),
    }
    for name, call in calls.items():
        with pytest.raises(trm.TrmError, match=f"^{name.strip()}"):
            call()
    with pytest.raises(trm.TrmError, match=r"^out is empty"):
        trm.train(tiny.spec, out="")
    assert not (tmp_path / "x").exists()


def test_a_spec_object_trains_like_its_file(tiny, tmp_path):
    from trm.spec import load_spec

    spec = load_spec(tiny.spec)
    run = trm.train(spec, out=tmp_path / "obj", max_steps=2, plugins=["no:progress"])
    by_file = trm.train(tiny.spec, out=tmp_path / "file", max_steps=2, plugins=["no:progress"])
    assert _training_content(run.metrics) == _training_content(by_file.metrics)


def test_estimate_is_the_document_trm_estimate_json_prints(cli):
    result = cli("estimate", "quickstart", "--json")
    assert result.code == 0, result.err
    from_cli = json.loads(result.out)
    document = trm.estimate("quickstart").document()
    # the process's resident size (an item) and the free memory (the budget) are measured
    # anew by each call; everything else is a function of the spec and the machine
    measured = "process baseline"

    def planned(doc: dict) -> list:
        return [
            (i["name"], i["location"], i["bytes"]) for i in doc["items"] if i["name"] != measured
        ]

    assert planned(document) == planned(from_cli) and planned(document)
    baselines = [
        next(i["bytes"] for i in d["items"] if i["name"] == measured) for d in (document, from_cli)
    ]
    host_planned = [
        d["host_total_bytes"] - b for d, b in zip((document, from_cli), baselines, strict=True)
    ]
    assert host_planned[0] == host_planned[1]
    for key in (
        "device_total_bytes",
        "budget_location",
        "target_fraction",
        "mode",
    ):
        assert document[key] == from_cli[key], key

    # the reader's and the changes' reasons quote the budget, measured anew by each call:
    # compare them without their figures
    def without_figures(entry: dict) -> dict:
        return {**entry, "reason": re.sub(r"[0-9.]+", "N", entry["reason"])}

    for d in (document, from_cli):
        d["reader"] = without_figures(d["reader"])
        d["changes"] = [without_figures(change) for change in d["changes"]]
    assert document["reader"] == from_cli["reader"]
    assert document["changes"] == from_cli["changes"] and document["changes"]
    assert (
        document["activation_checkpointing"].keys() == from_cli["activation_checkpointing"].keys()
    )
    estimate = trm.estimate("quickstart", mode="as-written")
    assert estimate.target_fraction == 1.0 and estimate.fits is estimate.document()["fits"]
    assert str(estimate).splitlines()[0].startswith("mode as-written")


def test_trm_all_names_every_public_name_with_a_contract():
    assert set(trm.__all__) == API_NAMES
    for name in trm.__all__:
        value = getattr(trm, name)
        if callable(value) and name != "hookimpl":
            assert value.__doc__ and len(value.__doc__) > 40, name
    assert inspect.isfunction(trm.train) and "spec" in str(inspect.signature(trm.train))
    from trm.loop import Trainer

    assert Trainer.__name__ == "Trainer"


def test_import_trm_does_not_import_torch():
    """Nor does naming ``trm.load`` (a root function that asks the torch-free formats first:
    an ONNX solver folder loads without torch); the API's other names import it on use."""
    code = (
        "import sys, trm; print('torch' in sys.modules); trm.load; print('torch' in sys.modules)"
        "; trm.Model; print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False", "True"]


def test_the_notebook_progress_line_is_rich_html_and_off_outside_a_kernel():
    from trm.plugins.operations.progress import NotebookLine, notebook_kernel

    line = NotebookLine("step 3/10  100 samples/s", 0.3)
    assert repr(line) == "step 3/10  100 samples/s"
    html = line._repr_html_()
    assert "step 3/10" in html and "━" in html and html.startswith("<pre")
    assert notebook_kernel() is False  # pytest is no Jupyter kernel


class StepCounter:
    """An in-process plugin object: counts the steps it sees."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    @trm.hookimpl
    def on_step(self, state) -> None:
        self.steps.append(state.step)


def test_a_plugin_object_sees_its_runs_steps_and_is_not_registered_in_the_next(tiny, tmp_path):
    counter = StepCounter()
    run = trm.train(
        tiny.spec, out=tmp_path / "first", plugins=[counter], disable=["progress"], max_steps=2
    )
    assert counter.steps == [1, 2] and run.summary.steps == 2
    trm.train(tiny.spec, out=tmp_path / "second", disable=["progress"], max_steps=2)
    assert counter.steps == [1, 2]  # the next run did not call it


def test_a_plugin_object_without_hooks_or_a_class_is_refused(tiny, tmp_path):
    with pytest.raises(trm.TrmError, match=r"plugins\[0\]: .* has no method marked"):
        trm.train(tiny.spec, out=tmp_path / "x", plugins=[object()])
    with pytest.raises(trm.TrmError, match=r"StepCounter is a class; pass an instance"):
        trm.train(tiny.spec, out=tmp_path / "x", plugins=[StepCounter])
    assert not (tmp_path / "x").exists()


def test_overrides_as_a_dict_train_as_the_same_texts(tiny, tmp_path):
    from trm.api.arguments import override_texts

    as_dict = {"train.lr": 3e-4, "runtime.precision": "fp32", "data.generate.count": 64}
    assert override_texts(as_dict) == (
        "train.lr=0.0003",
        "runtime.precision=fp32",
        "data.generate.count=64",
    )
    assert override_texts(["train.lr=3e-4"]) == ("train.lr=3e-4",)
    assert override_texts({"data.source": "true", "name": "a b"}) == (
        'data.source="true"',
        "name=a b",
    )
    by_dict = trm.train(
        tiny.spec,
        out=tmp_path / "d",
        overrides={"train.lr": 3e-4},
        disable=["progress"],
        max_steps=2,
    )
    by_text = trm.train(
        tiny.spec,
        out=tmp_path / "t",
        overrides=["train.lr=3e-4"],
        plugins=["no:progress"],
        max_steps=2,
    )
    assert _training_content(by_dict.metrics) == _training_content(by_text.metrics)
    with pytest.raises(trm.TrmError, match=r"overrides\['train.lr'\]: None is not a spec value"):
        override_texts({"train.lr": None})


def test_the_summary_is_typed_and_still_reads_as_summary_json(tiny, tmp_path):
    run = trm.train(tiny.spec, out=tmp_path / "s", disable=["progress"], max_steps=2)
    document = json.loads((run.path / "summary.json").read_text())
    assert run.summary == document and dict(run.summary) == document
    assert run.summary.steps == 2 and run.summary.stopped == run.stopped == "max_steps"
    assert isinstance(run.summary.wall_s, float) and run.summary["samples"] == run.summary.samples
    assert run.dir == run.path


def test_a_text_is_always_the_puzzle_and_a_path_is_a_file(tiny, tmp_path, monkeypatch):
    model = trm.load(tiny.run)
    puzzle = tmp_path / "puzzle.txt"
    puzzle.write_text(GOOD_PUZZLE)
    by_path = model.solve(puzzle)
    assert by_path.answer == model.solve(GOOD_PUZZLE).answer
    monkeypatch.chdir(tmp_path)
    with pytest.raises(trm.TrmError, match=r"pass pathlib.Path\('puzzle.txt'\)"):
        model.solve("puzzle.txt")
    with pytest.raises(trm.TrmError, match=r"puzzle file .*gone.txt does not exist"):
        model.solve(tmp_path / "gone.txt")


def test_trm_train_and_sweep_have_the_signatures_of_the_functions_they_call():
    from trm.api.training import train as api_train
    from trm.plugins.studies.sweep import sweep as api_sweep

    for ours, theirs in ((trm.train, api_train), (trm.sweep, api_sweep)):
        assert inspect.isfunction(ours)
        assert [
            (p.name, p.kind, p.default) for p in inspect.signature(ours).parameters.values()
        ] == [(p.name, p.kind, p.default) for p in inspect.signature(theirs).parameters.values()]
