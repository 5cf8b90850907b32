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
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from trm.api.model import Model, load_model, puzzle_argument
from trm.cli.common import non_negative_int, positive_int
from trm.cli.output import info, print_json
from trm.data.evaluator import TaskEvaluator
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.data.symmetry import check_attempts, check_attempts_count
from trm.errors import TrmError
from trm.evaluation.attempts import (
    AT_ATTEMPTS_PREFIX,
    AttemptPlan,
    at_attempts_key,
    plan_attempts,
)
from trm.evaluation.evaluate import evaluate
from trm.evaluation.explore import (
    CURVE_PREFIX,
    DEFAULT_NOISE,
    MAX_TRAJECTORIES,
    Exploration,
    check_exploration,
    plan_exploration,
)
from trm.evaluation.per_task import evaluate_tasks, task_splits
from trm.plugins.evaluation.held_out import manifest_at_attempts, score_kind
from trm.restore import check_eval_data
from trm.shipped import Manifest


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    ev = commands.add_parser("eval", parents=[common], help="score a checkpoint on held-out data")
    ev.add_argument(
        "checkpoint",
        type=Path,
        help="a checkpoint file, a run directory, a model folder (trm export --format hf) "
        "or a shipped model's name",
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
    _attempts_options(ev)
    _explore_options(ev)
    ev.add_argument(
        "--task", help="a model trained on a mix: score this task only (default: each task)"
    )
    ev.add_argument("--json", action="store_true", help="print one JSON document")
    ev.set_defaults(func=run_eval)

    solve = commands.add_parser("solve", parents=[common], help="solve one puzzle")
    solve.add_argument(
        "checkpoint",
        type=Path,
        help="a checkpoint file, a run directory, a model folder (trm export --format hf) "
        "or a shipped model's name",
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
    _attempts_options(solve)
    _explore_options(solve)
    solve.add_argument(
        "--task",
        help="a model trained on a mix: the task the puzzle is for (needed when the puzzle "
        "could be several tasks')",
    )
    solve.add_argument("--json", action="store_true", help="print one JSON document")
    solve.set_defaults(func=run_solve)


def _attempts_options(parser: argparse.ArgumentParser) -> None:
    """``--attempts K`` and ``--attempts-seed N`` (trm.evaluation.attempts)."""
    parser.add_argument(
        "--attempts",
        type=int,
        default=1,
        metavar="K",
        help="when an answer breaks the task's rules, try the puzzle again under up to K-1 of "
        "the task's symmetries (Sudoku, mazes) and keep the first answer the rules accept "
        "(default 1: the puzzle as given)",
    )
    parser.add_argument(
        "--attempts-seed",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="seed the symmetries of --attempts are drawn from (default 0)",
    )


def _explore_options(parser: argparse.ArgumentParser) -> None:
    """``--explore N``, ``--noise SIGMA``, ``--select RULE``, ``--explore-seed N``
    (trm.evaluation.explore; docs/test-time.md)."""
    parser.add_argument(
        "--explore",
        type=positive_int,
        default=1,
        metavar="N",
        help=f"run each puzzle as N trajectories in one batch, all but the first with noise in "
        f"the latent, and keep the one --select chooses (default 1: the plain answer; at most "
        f"{MAX_TRAJECTORIES})",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=None,
        metavar="SIGMA",
        help=f"standard deviation of the noise of --explore (default: the task's, "
        f"{DEFAULT_NOISE:g} unless it names its own)",
    )
    parser.add_argument(
        "--select",
        default=None,
        metavar="RULE",
        help="how --explore chooses: q (highest halting score), halt-first (first to halt), "
        "rules (first answer the task's rules accept), vote (majority), or a plugin's rule "
        "(default: the task's choice, else q)",
    )
    parser.add_argument(
        "--explore-seed",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="seed the noise of --explore is drawn from (default 0)",
    )


def _exploration(args: argparse.Namespace, loaded: Model) -> Exploration:
    """The exploration ``--explore``/``--noise``/``--select``/``--explore-seed`` ask of
    ``loaded``'s puzzles (refused for a model trained on a mix: one trajectory)."""
    if loaded.layout is not None and args.explore > 1:
        raise TrmError(
            f"--explore {args.explore}: a model trained on a mix answers with one trajectory; "
            "leave --explore out"
        )
    source = loaded.source
    if source is None:  # a mix's model: its tasks are scored with one plain trajectory
        return Exploration()
    return plan_exploration(
        loaded.pm, source, args.explore, args.noise, args.select, args.explore_seed
    )


def _cost(result: dict[str, Any]) -> str:
    """What the text output says beside the accuracy of an explored evaluation."""
    shown = f"; {result['trajectories_per_puzzle']:.3g} trajectories a puzzle"
    if "oracle_exact_accuracy" in result:
        shown += f", oracle {result['oracle_exact_accuracy']:.2%} (a trajectory was right)"
    return shown + f", {result['seconds_per_puzzle']:.3g} s a puzzle"


def run_eval(args: argparse.Namespace) -> int:
    check_attempts_count(args.attempts, "--attempts")
    check_exploration(args.explore, args.noise, args.explore_seed)
    loaded = load_model(args.checkpoint, tuple(args.plugins), info)
    exploration = _exploration(args, loaded)
    if loaded.layout is not None or args.task is not None:
        return _eval_mix(args, loaded)
    attempts = _attempt_plan(args, loaded)
    if loaded.manifest is not None and args.data is None:
        return _eval_shipped(args, loaded, loaded.manifest, attempts, exploration)
    payload, runtime, spec, model = loaded.payload, loaded.runtime, loaded.spec, loaded.module
    data_dir = loaded.data_dir(args.data)
    split = args.split if args.split is not None else spec.data.eval_split
    check_eval_data(payload, data_dir, split, given=args.split is not None)
    source = loaded.source
    evaluator = _task_evaluator(source, data_dir, split, args.submission)
    index = SplitIndex(open_split(data_dir / split))
    started_s = time.perf_counter()
    result = evaluate(
        model,
        index,
        spec.arch.halt_max_steps,
        args.batch_size,
        runtime.placement(),
        args.max_examples,
        getattr(source, "task_metrics", None),
        evaluator,
        attempts,
        exploration,
    )
    seconds_per_puzzle = (time.perf_counter() - started_s) / max(int(result["examples"]), 1)
    if args.submission is not None:
        _write_submission(args.submission, evaluator)
        info(f"wrote {args.submission}")
    result = {
        "checkpoint": str(args.checkpoint),
        "step": payload.get("step"),
        "split": str(data_dir / split),
        "explore": exploration.trajectories,
        "noise": exploration.noise if exploration.explores else 0.0,
        "select": exploration.rule.name if exploration.explores and exploration.rule else None,
        "trajectories_per_puzzle": 1.0,
        **result,
        "seconds_per_puzzle": seconds_per_puzzle,
    }
    if args.json:
        print_json(result)
    else:
        at_k = at_attempts_key(attempts.attempts)
        retried = (
            f" with 1 attempt, {result[at_k]:.2%} with {attempts.attempts}"
            if at_k in result and attempts.attempts > 1
            else ""
        )
        print(
            f"{result['examples']} examples of {result['split']} at step {result['step']}: "
            f"exact accuracy {result['exact_accuracy']:.2%}{retried}, "
            f"cell accuracy {result['cell_accuracy']:.2%}"
            + "".join(
                f", {_metric_name(k)} {_shown(k, v)}" for k, v in _task_values(result).items()
            )
            + (_cost(result) if exploration.explores else "")
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
    if args.attempts > 1:
        raise TrmError(
            f"--attempts {args.attempts}: a model trained on a mix is scored with one attempt; "
            "leave --attempts out"
        )
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


def _attempt_plan(args: argparse.Namespace, loaded: Model) -> AttemptPlan:
    """The attempts ``--attempts``/``--attempts-seed`` ask of ``loaded``'s puzzles."""
    seq_len = loaded.seq_len
    return plan_attempts(loaded.source, seq_len, args.attempts, args.attempts_seed, "--attempts")


def _eval_shipped(
    args: argparse.Namespace,
    loaded: Model,
    manifest: Manifest,
    attempts: AttemptPlan,
    exploration: Exploration,
) -> int:
    """``trm eval NAME``: each kind of the manifest scored again beside its recorded figure
    (with ``--attempts K``, the figures of one attempt and of K, beside the manifest's of K
    when it records them for that K and seed).

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
            attempts,
            exploration,
        )
        row = {
            "kind": kind.kind,
            "seed": kind.seed,
            "examples": score.examples,
            "exact_accuracy": score.exact_accuracy,
            "cell_accuracy": score.cell_accuracy,
            "manifest_count": kind.count,
            "manifest_exact_accuracy": kind.exact_accuracy,
            "manifest_cell_accuracy": kind.cell_accuracy,
            "trajectories_per_puzzle": score.trajectories_per_puzzle,
            "seconds_per_puzzle": score.seconds_per_puzzle,
        }
        if exploration.explores:
            row["oracle_exact_accuracy"] = score.oracle_exact_accuracy
            row.update(score.curve)  # explore@N/RULE: trm report draws them
        if attempts.attempts > 1:
            key = at_attempts_key(attempts.attempts)
            row[key] = score.exact_accuracy_at_attempts
            row[f"manifest_{key}"] = manifest_at_attempts(kind, attempts)
        rows.append(row)
    if args.json:
        chosen = exploration.rule.name if exploration.explores and exploration.rule else None
        print_json(
            {
                "model": manifest.name,
                "step": loaded.step,
                "explore": exploration.trajectories,
                "select": chosen,
                "kinds": rows,
            }
        )
        return 0
    print(f"{manifest.name} (shipped, step {loaded.step}): held-out exact accuracy")
    width = max([len(r["kind"]) for r in rows] + [4])
    k = attempts.attempts
    retried = f"    {f'exact@{k}':>8}  {'manifest':>8}" if k > 1 else ""
    print(f"  {'kind':<{width}}  examples  exact    manifest  cell{retried}")
    for r in rows:
        shown = ""
        if k > 1:
            recorded = r[f"manifest_{at_attempts_key(k)}"]
            shown = f"  {r[at_attempts_key(k)]:>8.2%}  " + (
                f"{recorded:>8.2%}" if recorded is not None else f"{'-':>8}"
            )
        print(
            f"  {r['kind']:<{width}}  {r['examples']:>8}  {r['exact_accuracy']:>7.2%}  "
            f"{r['manifest_exact_accuracy']:>7.2%}   {r['cell_accuracy']:.2%}{shown}"
            + (
                ""
                if r["examples"] == r["manifest_count"]
                else f"  ({r['manifest_count']} in the manifest)"
            )
            + (_cost(r) if exploration.explores else "")
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
    common = (
        "checkpoint",
        "step",
        "split",
        "examples",
        "exact_accuracy",
        "cell_accuracy",
        "explore",
        "noise",
        "select",
        "oracle_exact_accuracy",
        "trajectories_per_puzzle",
        "seconds_per_puzzle",
    )
    return {
        k: v
        for k, v in result.items()
        if k not in common and not k.startswith((AT_ATTEMPTS_PREFIX, CURVE_PREFIX))
    }


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
    check_attempts_count(args.attempts, "--attempts")
    check_exploration(args.explore, args.noise, args.explore_seed)
    model = load_model(args.checkpoint, tuple(args.plugins), info)
    if args.task is not None:
        model = model.for_task(args.task)
    if model.layout is None:
        check_attempts(model.source, args.attempts, "--attempts")
        _exploration(args, model)  # a bad --select is refused before the puzzle is read
    if callable(getattr(model.source, "solve_task", None)):
        return _solve_task(args, model)
    solution = model.solve(
        puzzle_argument(args.puzzle),
        attempts=args.attempts,
        attempts_seed=args.attempts_seed,
        explore=args.explore,
        noise=args.noise,
        select=args.select,
        explore_seed=args.explore_seed,
    )
    if args.json:
        print_json(solution.document())
    else:
        print(solution)
    info(f"solved with {model.spec.name} at step {model.step}")
    return 0


def _solve_task(args: argparse.Namespace, model: Model) -> int:
    """``trm solve`` through the source's ``solve_task`` (a task of many rows)."""
    solution = model.solve_task(
        args.puzzle,
        args.data,
        args.png,
        explore=args.explore,
        noise=args.noise,
        select=args.select,
        explore_seed=args.explore_seed,
    )
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
