"""The contract a data-source plugin fulfils (Sudoku, Maze, ARC, a third party's task).

A data plugin returns instances of :class:`DataSource` from the ``register_data_sources``
hook. The core never imports a source by name: it finds it by ``name`` (``[data] source`` in a
run spec, ``trm data build NAME``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class DataSource(Protocol):
    """A task that can build puzzle-dataset directories and read and judge its puzzles.

    ``options_type`` is an attrs class whose fields are the build options. The core
    structures ``[data.generate]`` of a run spec into it (errors name ``data.generate.KEY``) and
    turns each field into a ``--field-name`` option of ``trm data build NAME``; its docstring
    and field metadata ``{"help": ...}`` become the help text.

    Optional method (not part of the protocol; callers look it up with
    ``getattr(source, "is_solvable", None)`` and treat its absence as "not known"):

    ``is_solvable(question: np.ndarray) -> bool``
        True when the puzzle ``question`` (token row, dataset encoding) has at least one
        solution, False when the source's own solver proves it has none. ``trm solve`` uses it
        to say that no answer of the model can be valid (``"solvable"`` in its JSON: true,
        false, or null when the source has no such method).

    ``format_cells(tokens: np.ndarray) -> str``
        One character a cell of a token row, in reading order, as ``parse_puzzle`` reads
        them (Sudoku: digits and ``.``). ``trm solve --json`` gives it as
        ``question_cells``/``answer_cells`` (null without it).

    ``validate_options(options) -> None``
        Raise TrmError for impossible options before anything is built (``trm data build``
        calls it before touching ``--out``).

    ``dataset_problem(metadata, inputs, labels) -> str | None``
        Why a built dataset is not this source's puzzles, in a few words (``"its vocabulary
        has 6 tokens, a 6x6 Sudoku's has 8"``), or None when it reads as this task; given
        the split's :class:`trm.data.puzzle_dataset.PuzzleDatasetMetadata` and its first
        rows (int64 ``[rows, seq_len]``). A run refuses a ``data.dir`` (or a ``[[data.mix]]``
        table's ``dir``) its source answers a problem for, before anything is written.

    ``task_metrics(inputs, labels, predictions) -> dict[str, np.ndarray]``
        The task's own scores of a batch (int token arrays ``[B, seq_len]``; ``labels`` has
        -100 where a cell is not scored; ``predictions`` are the model's tokens for every
        cell): per-row values in [0, 1] by name, e.g. a maze's ``valid_path_rate``. The core
        averages each over the evaluated examples and reports it beside exact and cell
        accuracy — in eval rows of metrics.jsonl, ``on_eval`` and ``trm eval`` — and
        ``trm solve`` prints the one row's verdicts.

    ``evaluator(data_dir: Path, split: str) -> TaskEvaluator | None``
        A fresh :class:`trm.data.evaluator.TaskEvaluator` for one evaluation of
        ``data_dir/split`` (None: this split has no task-level scores), for tasks judged over
        many rows at once (ARC votes over the augmented versions of each test input). The
        core feeds it every evaluated batch with the model's confidence, sigmoid(q_halt),
        and reports its ``result()`` beside exact and cell accuracy; ``trm eval
        --submission FILE`` writes its ``submission()``. Raise TrmError when files it needs
        in ``data_dir`` are missing or malformed.

    ``answer_symmetries(seq_len: int, count: int, rng: np.random.Generator)
    -> list[trm.data.symmetry.CellSymmetry]``
        ``count`` maps of puzzles of ``seq_len`` cells, drawn with ``rng`` and none the
        identity, under which the task's answer is unchanged up to the same map: the image of
        a valid answer is a valid answer of the image of its puzzle (``check_answer`` judges
        both alike). An empty list when puzzles of this shape have none. ``--attempts K``
        (``trm solve``, ``trm eval``, ``Model.solve``, ``train.eval_attempts``) tries an
        answer the rules refuse again under them (:mod:`trm.evaluation.attempts`); a source
        without the method cannot be asked for more than one attempt.

    ``default_selection: str``
        The selection rule test-time exploration uses for this task when ``--select`` is not
        given (:mod:`trm.data.selection`); without it, ``q``.

    ``default_noise: float``
        The standard deviation of test-time exploration's noise for this task when
        ``--noise`` (``Model.solve``'s ``noise=``) is not given
        (:func:`trm.evaluation.explore.task_noise`); without it, 0.3. A run's
        ``train.eval_noise`` is a spec value and keeps its own default.

    ``rules_judge_answers: bool``
        False when ``check_answer`` cannot judge an answer from the question alone (ARC looks
        it up among known solutions): ``--select rules`` is then refused. True without it.

    ``primary_metric: str``
        The name of the score that picks a run's best checkpoint (e.g. ``"pass@2"``, which
        the source's evaluator must report); without it, ``exact_accuracy``.

    ``solve_task(argument: str, data_dir: Path | None, seq_len: int, run: RunRows,
    picture: Path | None) -> TaskSolution``
        ``trm solve`` for a task that takes many rows (several test inputs, augmented
        versions voted on): ``argument`` is what the user typed (a task id, a file),
        ``data_dir`` the checkpoint's dataset (None when it is gone and ``--data`` was not
        given), ``seq_len`` the model's row length, ``run`` the model
        (:data:`trm.data.evaluator.RunRows`), ``picture`` where to write an image (None: the
        source's default name in the current folder). Without it, ``trm solve`` parses one
        row with ``parse_puzzle``. Raises TrmError for an argument it cannot solve.
    """

    name: str
    options_type: type

    def build(self, options: Any, out_dir: Path, seed: int, log: Callable[[str], None]) -> None:
        """Write ``out_dir/train`` and ``out_dir/test`` in the puzzle-dataset format.

        Deterministic for the same ``options`` and ``seed``; no test question may also appear
        in train. Raises TrmError for bad options or unreadable input files.
        """
        ...

    def format_grid(self, tokens: np.ndarray) -> str:
        """Render one example's token row (dataset encoding) as human-readable text."""
        ...

    def parse_puzzle(self, text: str, seq_len: int) -> np.ndarray:
        """Parse a puzzle given on the command line or in a file into a token row.

        Returns int32 tokens of length ``seq_len`` in the dataset encoding. Raises TrmError
        naming what is malformed.
        """
        ...

    def check_answer(self, question: np.ndarray, answer: np.ndarray) -> bool:
        """True when ``answer`` (token row) is a valid solution of ``question`` (token row)."""
        ...
