"""``trm eval CHECKPOINT [--submission FILE]`` and ``trm solve CHECKPOINT PUZZLE|TASK``.

CHECKPOINT is a checkpoint file, a run directory, or the name of a shipped model
(``trm.shipped``; a path that exists wins). ``trm eval NAME`` without ``--data`` scores the
shipped model again on each puzzle kind its manifest lists (the held-out puzzles generated
anew from the recorded options and seed) and shows the manifest's figure beside each.

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

import numpy as np
import torch
from rich.console import Console

from trm.cli.common import non_negative_int, positive_int
from trm.cli.output import info, print_json
from trm.data.evaluator import RunRows, TaskEvaluator
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.errors import TrmError
from trm.plan.dataset import find_data_source
from trm.plan.pipeline import detect_hardware, runtime_here
from trm.plugin_manager import TrmPluginManager, load_plugins
from trm.shipped import (
    CHECKPOINT_SUFFIX,
    Manifest,
    looks_like_a_name,
    shipped_dir,
    shipped_manifest,
    shipped_names,
)
from trm.spec import RunSpec
from trm.train.evaluate import confidence, evaluate, predict, predict_with_halt
from trm.train.held_out import score_kind
from trm.train.inference import (
    check_eval_data,
    checkpoint_shape,
    checkpoint_spec,
    restore_model,
)

# Rows ``trm solve`` runs through the model at once for a task of many rows.
SOLVE_BATCH = 64
# Characters a puzzle written as text may consist of; such an argument is never a folder.
_PUZZLE_CHARS = set("0123456789.|-+ \t")


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
    solve.add_argument("--json", action="store_true", help="print one JSON document")
    solve.set_defaults(func=run_solve)


def _shipped(given: Path) -> tuple[Path, Manifest | None]:
    """The checkpoint ``given`` names and, for a shipped model's name, its manifest (the
    file checked against it). A path that exists wins over a name; a word that can only be
    a name and names no shipped model is a TrmError listing the shipped ones."""
    if given.exists() or not looks_like_a_name(str(given)):
        return given, None
    manifest = shipped_manifest(str(given))  # checks the file against it
    return shipped_dir() / f"{given}{CHECKPOINT_SUFFIX}", manifest


def _load(pm: TrmPluginManager, path: Path) -> dict:
    if not path.exists():
        names = ", ".join(shipped_names()) or "none"
        raise TrmError(
            f"checkpoint {path} does not exist; give a checkpoint file, a run dir or a "
            f"shipped model's name ({names})"
        )
    if not path.is_file() and not path.is_dir():
        raise TrmError(
            f"checkpoint {path} is not a regular file; give a checkpoint file or run dir"
        )
    payload = pm.hook.load_checkpoint(path=path, map_location="cpu")
    if payload is None:
        raise TrmError(
            f"no checkpoint found at {path}: the folder holds no checkpoints/step-*.pt files; "
            "give a checkpoint file or the directory of a `trm run`"
        )
    return payload


def _restore(args: argparse.Namespace) -> tuple[TrmPluginManager, dict, Any, RunSpec, Any]:
    """Plugins, checkpoint payload, runtime, spec and the model ready for inference.
    ``args.manifest`` is set to the shipped model's manifest (None for a path)."""
    path, args.manifest = _shipped(args.checkpoint)
    pm = load_plugins(args.plugins)
    payload = _load(pm, path)
    runtime = runtime_here(pm, checkpoint_spec(payload), detect_hardware(pm), info)
    spec, model = restore_model(payload, torch.device(runtime.device))
    return pm, payload, runtime, spec, model


def _data_dir(args: argparse.Namespace, payload: dict) -> Path:
    """``--data``, or the folder the checkpoint was trained on; TrmError when unusable."""
    if args.data is not None:
        path = args.data.expanduser()
        if not path.exists():
            raise TrmError(
                f"--data {path} does not exist; give the dataset folder "
                "`trm data build … --out DIR` wrote"
            )
        if not path.is_dir():
            raise TrmError(
                f"--data {path} is a file, not a dataset folder; give the folder "
                "`trm data build … --out DIR` wrote (it holds train/ and test/)"
            )
        return path
    recorded = payload.get("data_dir")
    if not recorded or not isinstance(recorded, str):
        raise TrmError(
            "the checkpoint does not record the dataset it was trained on; give one with --data DIR"
        )
    path = Path(recorded)
    if not path.is_dir():
        raise TrmError(
            f"the dataset the checkpoint was trained on, {path}, is no longer there; "
            "give its new place (or another dataset of the same kind) with --data DIR"
        )
    return path


def run_eval(args: argparse.Namespace) -> int:
    pm, payload, runtime, spec, model = _restore(args)
    if args.manifest is not None and args.data is None:
        return _eval_shipped(args, args.manifest, pm, payload, runtime, spec, model)
    data_dir = _data_dir(args, payload)
    split = args.split if args.split is not None else spec.data.eval_split
    check_eval_data(payload, data_dir, split, given=args.split is not None)
    source = _source(pm, spec)
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


def _eval_shipped(
    args: argparse.Namespace,
    manifest: Manifest,
    pm: TrmPluginManager,
    payload: dict,
    runtime: Any,
    spec: RunSpec,
    model: Any,
) -> int:
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
            pm,
            payload,
            spec,
            model,
            runtime.placement(),
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
        print_json({"model": manifest.name, "step": payload.get("step"), "kinds": rows})
        return 0
    print(f"{manifest.name} (shipped, step {payload.get('step')}): held-out exact accuracy")
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


def _puzzle_text(argument: str) -> tuple[str, Path | None]:
    """The puzzle text, read from a file when ``argument`` names one, and that file."""
    candidate = argument.strip()
    if not candidate or "\n" in candidate:
        return argument, None
    path = Path(candidate).expanduser()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):  # too long or odd for a path: it is the puzzle itself
        return argument, None
    if is_dir and not set(candidate) <= _PUZZLE_CHARS:
        raise TrmError(
            f"puzzle {candidate} is a folder; give the puzzle as text or a file holding it"
        )
    if not is_file:
        return argument, None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TrmError(
            f"puzzle file {path} cannot be read ({exc.strerror or exc}); check its permissions "
            "or give the puzzle as text"
        ) from None
    try:
        return data.decode("utf-8"), path
    except UnicodeDecodeError as exc:
        raise TrmError(
            f"puzzle file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); save the puzzle as plain text"
        ) from None


def _looks_like_a_file_name(argument: str) -> bool:
    """True for one word with a folder separator or a file extension of letters
    (``mazes/hard.txt``, ``puzzle.txt``): what a user who meant a file typed."""
    word = argument.strip()
    if not word or any(ch.isspace() for ch in word):
        return False
    suffix = Path(word).suffix[1:]
    return "/" in word or os.sep in word or (suffix.isalpha() and suffix.isascii())


def _parse(source: Any, argument: str, seq_len: int) -> np.ndarray:
    text, path = _puzzle_text(argument)
    try:
        tokens = source.parse_puzzle(text, seq_len)
    except TrmError as exc:
        if path is None:
            if _looks_like_a_file_name(argument):
                raise TrmError(
                    f"puzzle file {argument.strip()} does not exist (read as the puzzle itself "
                    f"it is not one: {exc}); check the file name"
                ) from None
            raise
        raise TrmError(f"{exc} (read from puzzle file {path})") from None
    except (ValueError, TypeError, IndexError) as exc:  # a source that breaks its contract
        where = f"puzzle file {path}" if path else "the puzzle"
        raise TrmError(f"{where} cannot be parsed by the {source.name} source: {exc}") from None
    question = np.asarray(tokens, dtype=np.int64).ravel()
    if question.shape != (seq_len,):
        raise TrmError(
            f"the puzzle has {question.size} cells; the checkpoint's model takes {seq_len}"
        )
    return question


def _solvable(source: Any, question: np.ndarray) -> bool | None:
    """The source's verdict on whether the puzzle has a solution; None when it cannot say."""
    check = getattr(source, "is_solvable", None)
    if not callable(check):
        return None
    return bool(check(question))


def _source(pm: TrmPluginManager, spec: RunSpec) -> Any:
    try:
        return find_data_source(pm, spec.data.source)
    except TrmError as exc:
        raise TrmError(
            f"the checkpoint was trained on data source {spec.data.source!r}, which no "
            f"plugin provides here ({exc}); switch its plugin on with --plugins NAME"
        ) from None


def _solve_data_dir(args: argparse.Namespace, payload: dict) -> Path | None:
    """``--data`` (checked), else the checkpoint's dataset when it is still there, else None."""
    if args.data is not None:
        return _data_dir(args, payload)
    recorded = payload.get("data_dir")
    if isinstance(recorded, str) and recorded and Path(recorded).is_dir():
        return Path(recorded)
    return None


def _row_runner(model: Any, payload: dict, spec: RunSpec, runtime: Any) -> RunRows:
    """The model as :data:`trm.data.evaluator.RunRows`, in batches of SOLVE_BATCH rows."""
    placement = runtime.placement()
    shape = checkpoint_shape(payload)

    def run(inputs: np.ndarray, identifiers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inputs = np.asarray(inputs, dtype=np.int64).reshape(-1, shape.seq_len)
        identifiers = np.asarray(identifiers, dtype=np.int64).reshape(-1)
        if len(identifiers) != len(inputs) or (
            len(identifiers)
            and not 0 <= identifiers.min() <= identifiers.max() < shape.num_puzzle_identifiers
        ):
            raise TrmError(
                f"the {spec.data.source} source asked to solve rows whose puzzle identifiers "
                f"do not fit the model's {shape.num_puzzle_identifiers}; is --data the "
                "dataset this checkpoint was trained on?"
            )
        answers, confidences = [], []
        for start in range(0, len(inputs), SOLVE_BATCH):
            rows = slice(start, start + SOLVE_BATCH)
            batch = {"inputs": inputs[rows], "labels": inputs[rows]}
            batch = placement.to_device({**batch, "puzzle_identifiers": identifiers[rows]})
            tokens, q_halt = predict_with_halt(model, batch, spec.arch.halt_max_steps, placement)
            answers.append(tokens.cpu().numpy())
            confidences.append(confidence(q_halt))
        if not answers:
            return np.zeros((0, shape.seq_len), dtype=np.int64), np.zeros(0)
        return np.concatenate(answers), np.concatenate(confidences)

    return run


def _solve_task(
    args: argparse.Namespace, payload: dict, spec: RunSpec, runtime: Any, model: Any, source: Any
) -> int:
    """``trm solve`` through the source's ``solve_task`` (a task of many rows)."""
    data_dir = _solve_data_dir(args, payload)
    if data_dir is not None:
        check_eval_data(payload, data_dir, spec.data.eval_split, given=False)
    run = _row_runner(model, payload, spec, runtime)
    seq_len = checkpoint_shape(payload).seq_len
    solution = source.solve_task(args.puzzle, data_dir, seq_len, run, args.png)
    if args.json:
        print_json(solution.document)
    elif isinstance(solution.view, str):
        print(solution.view)
    else:
        Console(highlight=False).print(solution.view)
    if solution.picture is not None:
        replaced = solution.document.get("picture_replaced") is True
        info(f"wrote {solution.picture}" + (", replacing the file there" if replaced else ""))
    info(f"solved with {spec.name} at step {payload.get('step')}")
    return 0


def run_solve(args: argparse.Namespace) -> int:
    pm, payload, runtime, spec, model = _restore(args)
    placement = runtime.placement()
    source = _source(pm, spec)
    if callable(getattr(source, "solve_task", None)):
        return _solve_task(args, payload, spec, runtime, model, source)
    try:
        question = _parse(source, args.puzzle, checkpoint_shape(payload).seq_len)
    except TrmError as exc:
        if args.manifest is None:
            raise
        raise TrmError(f"{args.manifest.name} solves {args.manifest.puzzle}: {exc}") from None
    batch = placement.to_device(
        {
            "inputs": question[None, :],
            "labels": question[None, :],
            "puzzle_identifiers": np.zeros(1, dtype=np.int64),
        }
    )
    answer = predict(model, batch, spec.arch.halt_max_steps, placement)[0].cpu().numpy()
    valid = bool(source.check_answer(question, answer))
    solvable = _solvable(source, question)
    task_metrics = getattr(source, "task_metrics", None)
    verdicts: dict[str, bool] = {}
    if callable(task_metrics):
        rows = task_metrics(question[None, :], question[None, :], answer[None, :])
        verdicts = {k.removesuffix("_rate"): bool(v[0] >= 1) for k, v in rows.items()}
    no_solution = (
        f"the puzzle has no solution (checked by the {source.name} solver); "
        "the model's answer cannot be valid"
    )
    if args.json:
        print_json(
            {
                "question": question.tolist(),
                "answer": answer.tolist(),
                "valid": valid,
                "solvable": solvable,
                **verdicts,
                "question_text": source.format_grid(question),
                "answer_text": source.format_grid(answer),
            }
        )
    else:
        print("puzzle:")
        print(source.format_grid(question))
        print("model's answer:")
        print(source.format_grid(answer))
        print("valid solution: " + ("yes" if valid else "no"))
        for name, verdict in verdicts.items():
            print(f"{_metric_name(name)}: {'yes' if verdict else 'no'}")
        if solvable is False:
            print(no_solution)
    info(f"solved with {spec.name} at step {payload.get('step')}")
    return 0
