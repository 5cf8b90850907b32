"""``trm eval CHECKPOINT [--submission FILE]`` and ``trm solve CHECKPOINT PUZZLE|TASK``.

CHECKPOINT is a checkpoint file, a run directory, or the name of a shipped model
(``trm.shipped``; a path that exists wins; ``trm.api.model.load_model`` resolves it).
``trm eval NAME`` without ``--data`` scores the shipped model again on each puzzle kind its
manifest lists (the held-out puzzles generated anew from the recorded options and seed) and
shows the manifest's figure beside each.

Bad input (a file that is not a checkpoint, a missing split, data of another shape than the
model, a malformed puzzle, a submission for a task that has no submission format) is one
TrmError line. A puzzle the data source's solver proves unsolvable is not an error: ``trm
solve`` shows the model's answer and says so. A source with a task evaluator (ARC) adds its
scores to ``trm eval``; one with ``solve_task`` solves a whole task (many rows) in ``trm
solve``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from trm.api.model import Model, load_model, puzzle_argument
from trm.cli.common import non_negative_int, positive_int
from trm.cli.output import info, print_json
from trm.data.evaluator import TaskEvaluator
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.errors import TrmError
from trm.evaluation.evaluate import evaluate
from trm.evaluation.held_out import score_kind
from trm.evaluation.per_task import evaluate_tasks, task_splits
from trm.restore import check_eval_data
from trm.shipped import Manifest


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    ev = commands.add_parser("eval", parents=[common], help="score a checkpoint on held-out data")
    ev.add_argument(
        "checkpoint",
        type=Path,
        help="a checkpoint file, a run directory or a shipped model's name",
    )
    ev.add_argument("--data", type=Path, help="dataset directory (default: the one trained on)")
    ev.add_argument("--split", default=None, help="split to score (default: the spec's eval split)")
    ev.add_argument(
        "--max-examples",
        type=non_negative_int,
        default=0,
        help="score only the first N (0, the default: all)",
    )
    ev.add_argument("--batch-size", type=positive_int, default=256, help="examples per batch")
    ev.add_argument(
        "--submission",
        type=Path,
        help="write the answers in the task's submission format (ARC Prize's submission.json)",
    )
    ev.add_argument(
        "--task", help="a model trained on a mix: score this task only (default: each task)"
    )
    ev.add_argument("--json", action="store_true", help="print one JSON document")
    ev.set_defaults(func=run_eval)

    solve = commands.add_parser("solve", parents=[common], help="solve one puzzle")
    solve.add_argument(
        "checkpoint",
        type=Path,
        help="a checkpoint file, a run directory or a shipped model's name",
    )
    solve.add_argument(
        "puzzle",
        help="the puzzle as text ('.' or 0 for blanks) or a file path; for ARC a task id of "
        "the dataset's test_puzzles.json or a task JSON file",
    )
    solve.add_argument(
        "--data", type=Path, help="dataset directory (default: the one trained on; ARC)"
    )
    solve.add_argument(
        "--png",
        type=Path,
        help="where a task that draws its answer writes the picture (ARC; default: TASK.png "
        "in the current folder)",
    )
    solve.add_argument(
        "--task",
        help="a model trained on a mix: the task the puzzle is for (needed when the puzzle "
        "could be several tasks')",
    )
    solve.add_argument("--json", action="store_true", help="print one JSON document")
    solve.set_defaults(func=run_solve)


def run_eval(args: argparse.Namespace) -> int:
    loaded = load_model(args.checkpoint, tuple(args.plugins), info)
    if loaded.manifest is not None and args.data is None:
        return _eval_shipped(args, loaded, loaded.manifest)
    if loaded.layout is not None or args.task is not None:
        return _eval_mix(args, loaded)
    payload, runtime, spec, model = loaded.payload, loaded.runtime, loaded.spec, loaded.module
    data_dir = loaded.data_dir(args.data)
    split = args.split if args.split is not None else spec.data.eval_split
    check_eval_data(payload, data_dir, split, given=args.split is not None)
    source = loaded.source
    evaluator = _task_evaluator(source, data_dir, split, args.submission)
    index = SplitIndex(open_split(data_dir / split))
    result = evaluate(
        model,
        index,
        spec.arch.halt_max_steps,
        args.batch_size,
        runtime.placement(),
        args.max_examples,
        getattr(source, "task_metrics", None),
        evaluator,
    )
    if args.submission is not None:
        _write_submission(args.submission, evaluator)
        info(f"wrote {args.submission}")
    result = {
        "checkpoint": str(args.checkpoint),
        "step": payload.get("step"),
        "split": str(data_dir / split),
        **result,
    }
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['examples']} examples of {result['split']} at step {result['step']}: "
            f"exact accuracy {result['exact_accuracy']:.2%}, "
            f"cell accuracy {result['cell_accuracy']:.2%}"
            + "".join(
                f", {_metric_name(k)} {_shown(k, v)}" for k, v in _task_values(result).items()
            )
        )
    return 0


def _eval_mix(args: argparse.Namespace, loaded: Model) -> int:
    """``trm eval`` of a model trained on a mix: each task (or ``--task``'s) scored apart, in
    its own encoding for its own metrics, and all together (trm.evaluation.per_task)."""
    layout = loaded.layout
    if layout is None:
        raise TrmError(f"--task {args.task}: the model was trained on one dataset; leave it out")
    if args.submission is not None:
        raise TrmError("--submission: a model trained on a mix has no submission format")
    data_dir = loaded.data_dir(args.data)
    split = args.split if args.split is not None else loaded.spec.data.eval_split
    check_eval_data(loaded.payload, data_dir, split, given=args.split is not None)
    index = SplitIndex(open_split(data_dir / split))
    names = [layout.task(args.task).name] if args.task is not None else list(layout.names)
    own = {name: getattr(loaded.for_task(name).source, "task_metrics", None) for name in names}
    tasks = [t for t in task_splits(layout, index, own) if t.name in names]
    figures = evaluate_tasks(
        loaded.module,
        tasks,
        loaded.spec.arch.halt_max_steps,
        args.batch_size,
        loaded.runtime.placement(),
        args.max_examples,
    )
    step = loaded.payload.get("step")
    result = {
        "checkpoint": str(args.checkpoint),
        "step": step,
        "split": str(data_dir / split),
        "tasks": names,
        **figures,
    }
    if args.json:
        print_json(result)
        return 0
    print(
        f"{result['examples']} examples of {result['split']} at step {step}: exact accuracy "
        f"{result['exact_accuracy']:.2%}, cell accuracy {result['cell_accuracy']:.2%}"
    )
    for name in names:
        own = {k.removesuffix(f"/{name}"): v for k, v in figures.items() if k.endswith(f"/{name}")}
        print(
            f"  {name}: {own['examples']} examples, exact accuracy "
            f"{own['exact_accuracy']:.2%}, cell accuracy {own['cell_accuracy']:.2%}"
            + "".join(
                f", {_metric_name(k)} {_shown(k, v)}"
                for k, v in _task_values(own).items()
                if k not in ("loss", "mean_halt_steps", "q_halt_accuracy")
            )
        )
    return 0


def _eval_shipped(args: argparse.Namespace, loaded: Model, manifest: Manifest) -> int:
    """``trm eval NAME``: each kind of the manifest scored again beside its recorded figure.

    ``--max-examples`` scores fewer than the manifest's count of each kind (a quicker,
    rougher check); ``--split`` and ``--submission`` need ``--data``."""
    for option in ("split", "submission"):
        if getattr(args, option) is not None:
            raise TrmError(
                f"--{option} needs --data DIR with a shipped model; without --data, `trm eval "
                f"{manifest.name}` scores the held-out puzzle kinds its manifest lists"
            )
    rows = []
    for kind in manifest.kinds:
        count = kind.count if args.max_examples <= 0 else min(args.max_examples, kind.count)
        info(f"{manifest.name}: generating the held-out puzzles of kind {kind.kind!r} …")
        score = score_kind(
            loaded.pm,
            loaded.payload,
            loaded.spec,
            loaded.module,
            loaded.runtime.placement(),
            kind.options,
            kind.seed,
            count,
            args.batch_size,
            _quiet,
            f"manifest of {manifest.name}, kind {kind.kind!r}",
        )
        rows.append(
            {
                "kind": kind.kind,
                "seed": kind.seed,
                "examples": score.examples,
                "exact_accuracy": score.exact_accuracy,
                "cell_accuracy": score.cell_accuracy,
                "manifest_count": kind.count,
                "manifest_exact_accuracy": kind.exact_accuracy,
                "manifest_cell_accuracy": kind.cell_accuracy,
            }
        )
    if args.json:
        print_json({"model": manifest.name, "step": loaded.step, "kinds": rows})
        return 0
    print(f"{manifest.name} (shipped, step {loaded.step}): held-out exact accuracy")
    width = max([len(r["kind"]) for r in rows] + [4])
    print(f"  {'kind':<{width}}  examples  exact    manifest  cell")
    for r in rows:
        print(
            f"  {r['kind']:<{width}}  {r['examples']:>8}  {r['exact_accuracy']:>7.2%}  "
            f"{r['manifest_exact_accuracy']:>7.2%}   {r['cell_accuracy']:.2%}"
            + (
                ""
                if r["examples"] == r["manifest_count"]
                else f"  ({r['manifest_count']} in the manifest)"
            )
        )
    return 0


def _quiet(_message: str) -> None:
    """Drop the data source's build messages (``trm eval NAME`` says what it generates)."""


def _task_evaluator(
    source: Any, data_dir: Path, split: str, submission: Path | None
) -> TaskEvaluator | None:
    """The source's task evaluator for ``data_dir/split`` (None: it has none); TrmError,
    before anything is evaluated, when ``--submission`` cannot be written."""
    factory = getattr(source, "evaluator", None)
    evaluator = factory(data_dir, split) if callable(factory) else None
    if submission is None:
        return evaluator
    if evaluator is None:
        raise TrmError(
            f"--submission: the {source.name} source has no submission format for split "
            f"{split!r}; leave --submission out"
        )
    folder = submission.expanduser().parent
    if submission.is_dir() or not folder.is_dir():
        raise TrmError(
            f"--submission {submission}: "
            + ("is a folder" if submission.is_dir() else f"folder {folder} does not exist")
            + "; give a file path such as submission.json"
        )
    probe = _temporary(submission)
    try:
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise TrmError(
            f"--submission {submission} cannot be written ({exc.strerror or exc}); give a "
            "path in a folder you can write to"
        ) from None
    return evaluator


def _temporary(path: Path) -> Path:
    """Where the submission is written before it is renamed over ``path`` (a name of this
    process, so no file of the user's is touched)."""
    path = path.expanduser()
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_submission(path: Path, evaluator: TaskEvaluator | None) -> None:
    """Write the evaluator's submission document as JSON (atomically: a temporary file
    renamed over ``path``)."""
    assert evaluator is not None  # _task_evaluator refused this before the evaluation
    document = evaluator.submission()
    path = path.expanduser()
    temporary = _temporary(path)
    if path.exists():
        info(f"--submission {path} exists: replacing it")
    try:
        temporary.write_text(json.dumps(document) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a read-only folder: nothing was left there
            temporary.unlink(missing_ok=True)
        raise TrmError(
            f"--submission {path} cannot be written ({exc.strerror or exc}); check the folder"
        ) from None


def _task_values(result: dict[str, Any]) -> dict[str, float]:
    """The task metrics of an evaluation (the keys beyond exact and cell accuracy)."""
    common = ("checkpoint", "step", "split", "examples", "exact_accuracy", "cell_accuracy")
    return {k: v for k, v in result.items() if k not in common}


def _shown(key: str, value: float) -> str:
    """A metric as the text output shows it: fractions (accuracies, rates, pass@K) as
    percentages, other numbers (loss, mean halt steps) as they are."""
    if key.endswith(("accuracy", "_rate")) or key.startswith("pass@"):
        return f"{value:.2%}"
    return f"{value:.4g}"


def _metric_name(key: str) -> str:
    """``valid_path_rate`` → ``valid path rate``."""
    return key.replace("_", " ")


def run_solve(args: argparse.Namespace) -> int:
    model = load_model(args.checkpoint, tuple(args.plugins), info)
    if args.task is not None:
        model = model.for_task(args.task)
    if callable(getattr(model.source, "solve_task", None)):
        return _solve_task(args, model)
    solution = model.solve(puzzle_argument(args.puzzle))
    if args.json:
        print_json(solution.document())
    else:
        print(solution)
    info(f"solved with {model.spec.name} at step {model.step}")
    return 0


def _solve_task(args: argparse.Namespace, model: Model) -> int:
    """``trm solve`` through the source's ``solve_task`` (a task of many rows)."""
    solution = model.solve_task(args.puzzle, args.data, args.png)
    if args.json:
        print_json(solution.document)
    elif isinstance(solution.view, str):
        print(solution.view)
    else:
        Console(highlight=False).print(solution.view)
    if solution.picture is not None:
        replaced = solution.document.get("picture_replaced") is True
        info(f"wrote {solution.picture}" + (", replacing the file there" if replaced else ""))
    info(f"solved with {model.spec.name} at step {model.step}")
    return 0
