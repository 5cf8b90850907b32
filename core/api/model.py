"""``trm.load`` and ``Model.solve``: a trained model ready to answer puzzles.

``trm solve`` and ``trm eval`` (the ``evaluation`` plugin, plugins/evaluation/eval_cmd.py)
load through :func:`load_model` and solve through :meth:`Model.solve` /
:meth:`Model.solve_task`; ``trm.load`` is the same function for scripts and notebooks. The
answer's validity is checked by the task's own rules (the data source's ``check_answer``),
never by the model.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from trm.api.arguments import plugin_arguments, python_errors
from trm.api.log import Log, say
from trm.api.mixed import checkpoint_layout, pick_task
from trm.api.stepping import StepAnswer, step_answers
from trm.data.evaluator import RunRows, TaskSolution
from trm.data.mix_layout import MixLayout
from trm.errors import TrmError
from trm.evaluation.attempts import plan_attempts, try_again
from trm.evaluation.explore import (
    Exploration,
    Explored,
    Explorer,
    plan_exploration,
    puzzles_in_batch,
)
from trm.evaluation.steps import confidence
from trm.formats import located_model, whole_model_format
from trm.plan.dataset import find_data_source
from trm.plan.pipeline import detect_hardware, runtime_here
from trm.plugin_manager import TrmPluginManager, load_plugins
from trm.puzzles import parse_puzzle
from trm.puzzles import puzzle_argument as puzzle_argument  # what trm solve reads a puzzle with
from trm.restore import check_eval_data, checkpoint_shape, checkpoint_spec, restore_model
from trm.runtime import RuntimeChoice
from trm.shipped import (
    CHECKPOINT_SUFFIX,
    Manifest,
    check_kind_sources,
    looks_like_a_name,
    shipped_dir,
    shipped_manifest,
    shipped_names,
)
from trm.solution import Solution, Trajectory, solution_of
from trm.spec import RunSpec

# Rows ``solve_task`` runs through the model at once for a task of many rows.
SOLVE_BATCH = 64


def trajectory_records(explored: Explored, check: Any = None) -> tuple[Trajectory, ...]:
    """The trajectories of the first puzzle of ``explored`` (none with one trajectory)."""
    count = explored.answers.shape[1]
    if count == 1:
        return ()
    chosen = int(explored.chosen[0])
    return tuple(
        Trajectory(
            halt_step=int(explored.halt_steps[0, i]),
            q_halt=float(explored.q_halt[0, i]),
            chosen=i == chosen,
            valid=bool(check(explored.answers[0, i])) if check is not None else False,
        )
        for i in range(count)
    )


@attrs.define
class Model:
    """A trained TRM with its data source, in eval mode on this machine's device.

    Made by :func:`trm.load`. ``spec`` is the spec the checkpoint was trained with,
    ``step`` the optimizer step it was saved at, ``checkpoint`` the file or folder it was
    loaded from, ``source`` the task's data source (parsing, formatting, checking puzzles),
    ``manifest`` the shipped model's manifest (``trm.shipped``) when it was loaded by a
    shipped model's name, else None.
    """

    spec: RunSpec
    step: int | None
    checkpoint: Path
    source: Any
    payload: dict[str, Any] = attrs.field(repr=False)
    runtime: RuntimeChoice = attrs.field(repr=False)
    module: torch.nn.Module = attrs.field(repr=False)
    pm: TrmPluginManager = attrs.field(repr=False)
    manifest: Manifest | None = attrs.field(default=None, repr=False)
    # a model of a multi-task mix: the task it solves (``source`` is that task's; None: not
    # chosen yet, and ``source`` is None) — see :meth:`for_task` and trm.api.mixed
    task: str | None = None

    @property
    def layout(self) -> MixLayout | None:
        """The mix layout of a model trained on several tasks (None: one dataset)."""
        return checkpoint_layout(self.payload)

    @property
    def seq_len(self) -> int:
        """Tokens in one puzzle this model takes (a 9x9 Sudoku: 81; of a mix: the task's)."""
        layout = self.layout
        if layout is not None and self.task is not None:
            return layout.task(self.task).seq_len
        return checkpoint_shape(self.payload).seq_len

    def for_task(self, task: str) -> Model:
        """This mixed model bound to its task ``task`` (its source parses, formats and checks
        the puzzles); TrmError naming the tasks it learned."""
        layout = self.layout
        if layout is None:
            raise TrmError(f"--task {task}: the model was trained on one dataset; leave it out")
        source = find_data_source(self.pm, layout.task(task).source)
        return attrs.evolve(self, task=task, source=source)

    def _task_sources(self) -> dict[str, Any]:
        layout = self.layout
        assert layout is not None
        return {t.name: find_data_source(self.pm, t.source) for t in layout.tasks}

    def solve(
        self,
        puzzle: str | os.PathLike[str],
        *,
        attempts: int = 1,
        attempts_seed: int = 0,
        task: str | None = None,
        explore: int = 1,
        noise: float | None = None,
        select: str | None = None,
        explore_seed: int = 0,
    ) -> Solution:
        """Solve one puzzle: text in the task's format ('.' or 0 for blanks; a maze drawn
        in characters), or a :class:`pathlib.Path` of a file holding it (a text is always
        the puzzle itself, never a file name). TrmError, with ``trm solve``'s message, for
        a malformed puzzle, one of another size than the model's (for a shipped model, the
        message begins with the size it solves: ``quickstart solves 4x4 Sudoku (16 cells):
        …``), or a task solved whole (ARC: :meth:`solve_task`).

        ``attempts`` K: when the answer breaks the task's rules, the puzzle is tried again
        under up to K - 1 of the task's symmetries drawn from ``attempts_seed``, and the
        first answer the rules accept is returned (:mod:`trm.evaluation.attempts`); 1, the
        default, is the puzzle as given only. TrmError for fewer than 1 or more than 1024,
        more than 1 for a task without symmetries or for a model trained on a mix, or a seed
        that is not a whole number of 0 or more.

        ``explore`` N: the puzzle runs as N trajectories in one batch, all but the first with
        Gaussian noise of standard deviation ``noise`` (None: the task's default) in the
        latent, drawn from ``explore_seed``; ``select`` names the rule that picks the answer
        (None: the task's default) — :mod:`trm.evaluation.explore`. Each attempt explores.
        1, the default, is the plain answer. TrmError for values out of range, an unknown
        rule, or more than one trajectory for a model trained on a mix.

        ``task`` names the task of a model trained on a mix (needed only when the puzzle
        could be several tasks')."""
        layout = self.layout
        if layout is not None and (self.task is None or task not in (None, self.task)):
            name = pick_task(layout, self._task_sources(), puzzle, task, parse_puzzle)
            return self.for_task(name).solve(
                puzzle,
                attempts=attempts,
                attempts_seed=attempts_seed,
                explore=explore,
                noise=noise,
                select=select,
                explore_seed=explore_seed,
            )
        self._check_mix_options(task, attempts, explore)
        source = self.source
        if callable(getattr(source, "solve_task", None)):
            raise TrmError(
                f"the {source.name} source solves whole tasks: use Model.solve_task(TASK) "
                "(a task id or a task JSON file)"
            )
        plan = plan_attempts(source, self.seq_len, attempts, attempts_seed, "attempts")
        exploration = plan_exploration(
            self.pm, source, explore, noise, select, explore_seed, where=""
        )
        question = self._question(puzzle)
        explorer = Explorer(exploration, self.runtime.placement())
        answered = self._answer(question, explorer)
        answer, steps, attempt = answered.selected[0], answered.selected_halt_steps, 1
        if plan.attempts > 1:
            run = explorer.puzzle_runner(self.module, self.spec.arch.halt_max_steps, 1)
            identifiers = np.zeros(1, dtype=np.int64)
            tried = try_again(plan, run, question[None, :], identifiers, answer[None, :], steps)
            answer, steps = tried.answers[0], tried.halt_steps
            attempt = int(tried.attempt[0]) or None
        return self._solution(question, answer, int(steps[0]), plan.attempts, attempt, answered)

    def steps(
        self, puzzle: str | os.PathLike[str], *, task: str | None = None
    ) -> Iterator[StepAnswer]:
        """The answer to ``puzzle`` after each supervision step, one
        :class:`~trm.api.stepping.StepAnswer` at a time as the model computes it (the plain
        trajectory that :meth:`solve` runs; the last step's answer is ``solve``'s with its
        defaults). ``puzzle`` and ``task`` as :meth:`solve`'s; the puzzle is read (and a
        malformed one refused with TrmError) before the first step is yielded. For a task
        solved whole (ARC: a task JSON), the steps are those of its first test input as
        given, under the blank puzzle identifier."""
        layout = self.layout
        if layout is not None and (self.task is None or task not in (None, self.task)):
            name = pick_task(layout, self._task_sources(), puzzle, task, parse_puzzle)
            return self.for_task(name).steps(puzzle)
        self._check_mix_options(task, 1, 1)
        question = self._question(puzzle)
        mixed = None
        if layout is not None and self.task is not None:  # into the mix's tokens and back
            name = self.task
            mixed = (
                layout.to_mixed(name, question),
                layout.task(name).identifier_offset,
                lambda tokens: layout.from_mixed(name, tokens),
            )
        halt_max_steps = self.spec.arch.halt_max_steps
        placement = self.runtime.placement()
        return step_answers(self.module, question, halt_max_steps, placement, self.source, mixed)

    def _check_mix_options(self, task: str | None, attempts: int, explore: int) -> None:
        """TrmError for ``task`` given to a model of one dataset, or more than one attempt or
        trajectory asked of a model trained on a mix."""
        if task is not None and self.layout is None:
            raise TrmError(f"--task {task}: the model was trained on one dataset; leave it out")
        if self.layout is None:
            return
        for option, value in (("attempts", attempts), ("explore", explore)):
            if not isinstance(value, bool) and isinstance(value, int) and value > 1:
                raise TrmError(
                    f"--{option} {value}: a model trained on a mix answers with one "
                    f"{'attempt' if option == 'attempts' else 'trajectory'}; leave --{option} out"
                )

    def _question(self, puzzle: str | os.PathLike[str]) -> np.ndarray:
        """The puzzle's token row (:func:`parse_puzzle`); a shipped model's message begins
        with the puzzles it solves."""
        try:
            return parse_puzzle(self.source, puzzle, self.seq_len)
        except TrmError as exc:
            if self.manifest is None:
                raise
            raise TrmError(f"{self.manifest.name} solves {self.manifest.puzzle}: {exc}") from None

    def _answer(self, question: np.ndarray, explorer: Explorer) -> Explored:
        """The model's trajectories of ``question`` (in the task's tokens; a mix's model runs
        it in the mix's tokens) and the chosen one."""
        layout, row, identifier = self.layout, question, 0
        if layout is not None and self.task is not None:  # into the mix's tokens
            row = layout.to_mixed(self.task, question)
            identifier = layout.task(self.task).identifier_offset
        batch = explorer.placement.to_device(
            {
                "inputs": row[None, :],
                "labels": row[None, :],
                "puzzle_identifiers": np.full(1, identifier, dtype=np.int64),
            }
        )
        explored = explorer.run(self.module, batch, self.spec.arch.halt_max_steps)
        if layout is not None and self.task is not None:  # back into the task's tokens
            back = layout.from_mixed(self.task, explored.answers[0, 0])
            explored = attrs.evolve(explored, answers=back[None, None, :])
        return explored

    def _solution(
        self,
        question: np.ndarray,
        answer: np.ndarray,
        steps: int,
        attempts: int,
        attempt: int | None,
        explored: Explored,
    ) -> Solution:
        """The :class:`Solution` of ``answer`` with the task's verdicts on it."""
        source = self.source
        return solution_of(
            source,
            question,
            answer,
            steps,
            self.spec.arch.halt_max_steps,
            attempts=attempts,
            attempt=attempt,
            trajectories=trajectory_records(
                explored, lambda tokens: source.check_answer(question, tokens)
            ),
        )

    def solve_task(
        self,
        task: str,
        data: Path | None = None,
        png: Path | None = None,
        *,
        explore: int = 1,
        noise: float | None = None,
        select: str | None = None,
        explore_seed: int = 0,
    ) -> TaskSolution:
        """Solve a whole task of many rows through the data source's ``solve_task`` (ARC:
        a task id of the dataset's test_puzzles.json or a task JSON file); ``data`` the
        dataset folder (default: the one trained on, when it is still there), ``png`` where
        a task that draws its answer writes the picture. TrmError for a source that solves
        single puzzles (use :meth:`solve`). ``explore``, ``noise``, ``select`` and
        ``explore_seed`` as :meth:`solve`'s: each row (each augmented version of ARC's vote)
        is explored, and its chosen answer, with its confidence, is what the task votes on."""
        if self.layout is not None:
            raise TrmError(
                "a model trained on a mix solves single puzzles of its tasks (trm solve "
                "--task NAME PUZZLE); whole tasks of many rows (ARC) are not solved from a mix"
            )
        solve = getattr(self.source, "solve_task", None)
        if not callable(solve):
            raise TrmError(
                f"the {self.source.name} source solves single puzzles: use Model.solve(PUZZLE)"
            )
        exploration = plan_exploration(
            self.pm, self.source, explore, noise, select, explore_seed, where=""
        )
        data_dir = self.data_dir(data) if data is not None else self._recorded_data()
        if data_dir is not None:
            check_eval_data(self.payload, data_dir, self.spec.data.eval_split, given=False)
        return solve(task, data_dir, self.seq_len, self._row_runner(exploration), png)

    def data_dir(self, data: Path | None) -> Path:
        """``data`` (checked), or the folder the checkpoint was trained on; TrmError, with
        ``--data`` in the message as ``trm eval`` says it, when unusable."""
        if data is not None:
            path = Path(data).expanduser()
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
        recorded = self.payload.get("data_dir")
        if not recorded or not isinstance(recorded, str):
            raise TrmError(
                "the checkpoint does not record the dataset it was trained on; give one with "
                "--data DIR"
            )
        path = Path(recorded)
        if not path.is_dir():
            raise TrmError(
                f"the dataset the checkpoint was trained on, {path}, is no longer there; "
                "give its new place (or another dataset of the same kind) with --data DIR"
            )
        return path

    def _recorded_data(self) -> Path | None:
        recorded = self.payload.get("data_dir")
        if isinstance(recorded, str) and recorded and Path(recorded).is_dir():
            return Path(recorded)
        return None

    def _row_runner(self, exploration: Exploration | None = None) -> RunRows:
        """The model as :data:`trm.data.evaluator.RunRows`, in batches of SOLVE_BATCH rows
        (rows × trajectories when ``exploration`` explores: the chosen answers and their
        confidence)."""
        placement = self.runtime.placement()
        shape = checkpoint_shape(self.payload)
        spec, model = self.spec, self.module
        explorer = Explorer(exploration or Exploration(), placement)
        per_batch = puzzles_in_batch(SOLVE_BATCH, explorer.exploration.trajectories)

        def run(inputs: np.ndarray, identifiers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            inputs = np.asarray(inputs, dtype=np.int64).reshape(-1, shape.seq_len)
            identifiers = np.asarray(identifiers, dtype=np.int64).reshape(-1)
            if len(identifiers) != len(inputs) or (
                len(identifiers)
                and not 0 <= identifiers.min() <= identifiers.max() < shape.num_puzzle_identifiers
            ):
                raise TrmError(
                    f"the {spec.data.source} source asked to solve rows whose puzzle "
                    f"identifiers do not fit the model's {shape.num_puzzle_identifiers}; is "
                    "--data the dataset this checkpoint was trained on?"
                )
            answers, confidences = [], []
            for start in range(0, len(inputs), per_batch):
                rows = slice(start, start + per_batch)
                batch = {"inputs": inputs[rows], "labels": inputs[rows]}
                batch = placement.to_device({**batch, "puzzle_identifiers": identifiers[rows]})
                explored = explorer.run(model, batch, spec.arch.halt_max_steps)
                answers.append(explored.selected)
                confidences.append(confidence(explored.selected_q_halt))
            if not answers:
                return np.zeros((0, shape.seq_len), dtype=np.int64), np.zeros(0)
            return np.concatenate(answers), np.concatenate(confidences)

        return run


def load(name_or_path: str | Path, *, plugins: Any = ()) -> Model:
    """The model of a run directory (its newest valid checkpoint), a checkpoint file, a model
    folder ``trm export --format hf`` wrote, or a shipped model's name (``"sudoku9-laptop"``),
    ready on this machine's device.

    ``plugins`` switches plugins on as :func:`trm.train`'s does: installed plugins by name
    (a data source's plugin, say) or plugin objects. TrmError, with ``trm solve``'s
    message, for a path that holds no checkpoint, an unknown shipped name (the message lists
    the shipped names), or a damaged or incompatible checkpoint.
    """
    with python_errors():
        if not isinstance(name_or_path, (str, Path)) or not str(name_or_path).strip():
            raise TrmError(
                "load takes a run directory, a checkpoint file or a shipped model's name "
                f"(str or pathlib.Path), not {name_or_path!r}"
            )
        names, objects = plugin_arguments(plugins, None)
        return load_model(Path(name_or_path), names, say, objects)


def load_model(
    path: Path,
    plugins: tuple[str, ...],
    log: Log,
    plugin_objects: Iterable[tuple[str, Any]] = (),
) -> Model:
    """The work of :func:`load` (and of ``trm solve``/``trm eval``): resolve a shipped
    name, load the checkpoint through ``load_checkpoint``, pick this machine's runtime,
    rebuild the model and find its data source. ``plugin_objects`` are in-process plugins
    with the names they run under."""
    pm = load_plugins(plugins, extra_modules=tuple(plugin_objects))
    path, manifest = _checkpoint_path(pm, path)
    payload = _load_payload(pm, path)
    # a shipped model runs wherever it is installed: where it was trained is no news
    said = log if manifest is None else _unsaid
    runtime = runtime_here(pm, checkpoint_spec(payload), detect_hardware(pm), said)
    spec, module = restore_model(payload, torch.device(runtime.device))
    if manifest is not None:
        check_kind_sources(manifest, spec.data.source)
    step = payload.get("step")
    return Model(
        spec=spec,
        step=step if isinstance(step, int) else None,
        checkpoint=path,
        source=_source(pm, spec),
        payload=payload,
        runtime=runtime,
        module=module,
        pm=pm,
        manifest=manifest,
    )


def _unsaid(_message: str) -> None:
    """A log that keeps its lines to itself."""


def _checkpoint_path(pm: TrmPluginManager, path: Path) -> tuple[Path, Manifest | None]:
    """The checkpoint ``path`` names and, for a shipped model's name, its manifest.

    A path that exists wins (manifest None). One bare word (no folder, no extension:
    ``trm.shipped.looks_like_a_name``) is a shipped model's name: its ``NAME.pt``, checked
    against the manifest's SHA-256; an unknown name is a TrmError listing the shipped ones.
    A name a format locates (``trm.formats.located_model``: a Hub repo id in the local
    Hugging Face cache) is that folder. Any other missing path is a TrmError saying what may
    be given."""
    if path.exists():
        return path, None
    word = str(path)
    if looks_like_a_name(word):
        manifest = shipped_manifest(word)  # checks the file against it
        return shipped_dir() / f"{word}{CHECKPOINT_SUFFIX}", manifest
    located = located_model(pm, word)
    if located is not None:
        return located, None
    names = ", ".join(shipped_names()) or "none"
    raise TrmError(
        f"checkpoint {path} does not exist; give a checkpoint file, a run dir or a "
        f"shipped model's name ({names})"
    )


def _load_payload(pm: TrmPluginManager, path: Path) -> dict[str, Any]:
    """The payload of a checkpoint file, a run directory (its newest valid checkpoint, via
    ``load_checkpoint``) or a whole model of a format a plugin offers (``register_formats``:
    a model folder ``trm export --format hf`` wrote, read with json and safetensors only)."""
    whole = whole_model_format(pm, path)
    if whole is not None:
        return whole.read_payload(path)
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


def _source(pm: TrmPluginManager, spec: RunSpec) -> Any:
    """The checkpoint's data source; None for a mix (each task has its own: Model.for_task),
    whose sources must all be here."""
    if spec.data.is_mix:
        for entry in spec.data.mix:
            _source(pm, attrs.evolve(spec, data=attrs.evolve(spec.data, source=entry.source)))
        return None
    try:
        return find_data_source(pm, spec.data.source)
    except TrmError as exc:
        raise TrmError(
            f"the checkpoint was trained on data source {spec.data.source!r}, which no "
            f"plugin provides here ({exc}); switch its plugin on with --plugins NAME"
        ) from None
