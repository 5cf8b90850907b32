"""The ONNX solver: a folder ``trm export --format onnx`` wrote, run with onnxruntime and
NumPy, never torch.

:class:`OnnxSolver` reads the card (:mod:`.onnx_card`), parses the puzzle with the task's
data source (the same ``parse_puzzle`` and messages as ``trm solve`` of a checkpoint),
runs every supervision step of the graph, and builds the same
:class:`trm.solution.Solution` from the last step's answer: the same text, the same JSON,
plus every step's answer and halting logit (``step_answers``, ``step_q_halt``).

The halting step is the first at which the card's ``halt_rule`` holds (as
``trm.evaluation.steps.asks_to_halt`` decides it), else the last step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from trm.errors import TrmError
from trm.plugin_manager import TrmPluginManager
from trm.plugins.formats.onnx_card import CARD_FILE, MODEL_FILE, read_card
from trm.puzzles import parse_puzzle
from trm.solution import Solution, solution_of


def halt_steps(q_halt: np.ndarray, q_continue: np.ndarray, rule: str) -> np.ndarray:
    """Per row, the first step (1..steps) at which ``rule`` holds, ``steps`` when it never
    does; ``q_halt``, ``q_continue`` are [steps, batch]."""
    asks = q_halt > 0 if rule == "q_halt > 0" else q_halt > q_continue
    steps = asks.shape[0]
    first = np.argmax(asks, axis=0) + 1
    return np.where(asks.any(axis=0), first, steps)


class OnnxSolver:
    """The solver folder ``folder`` (its card ``card``; ``model_file`` the graph) for the
    data source ``source``. The onnxruntime session opens on the first solve.

    ``name``, ``task``, ``seq_len`` and ``steps`` are the card's; :meth:`solve` answers one
    puzzle, :meth:`run_rows` many token rows at once."""

    def __init__(self, folder: Path, card: dict[str, Any], source: Any, model_file: Path) -> None:
        self.folder = folder
        self.card = card
        self.source = source
        self.model_file = model_file
        self.task: str = card["task"]
        self.seq_len: int = card["seq_len"]
        self.steps: int = card["steps"]
        model = card["model"]
        self.name: str = str(model.get("name") or folder.name)
        self._session: Any = None

    def __repr__(self) -> str:
        return f"OnnxSolver(name={self.name!r}, task={self.task!r}, folder={str(self.folder)!r})"

    @property
    def runtime_version(self) -> str:
        import onnxruntime

        return onnxruntime.__version__

    @property
    def solved_with(self) -> str:
        step = self.card["model"].get("step")
        at = f" at step {step}" if isinstance(step, int) else ""
        return f"solved with {self.name}{at} (ONNX, onnxruntime {self.runtime_version})"

    def _open(self) -> Any:
        if self._session is not None:
            return self._session
        try:
            import onnxruntime
        except ImportError:
            raise TrmError(
                "an ONNX solver runs with onnxruntime, which is not installed: "
                "pip install 'trm[onnx]'"
            ) from None
        if not self.model_file.is_file():
            raise TrmError(
                f"{self.folder} holds {CARD_FILE} but no {self.model_file.name}; copy the whole "
                "folder `trm export --format onnx` wrote"
            )
        try:
            self._session = onnxruntime.InferenceSession(
                str(self.model_file), providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own classes for a damaged file
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise TrmError(
                f"{self.model_file} cannot be read by onnxruntime ({first}); it is damaged "
                "(export it again)"
            ) from None
        return self._session

    def run_rows(self, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every step of the graph on token rows ``inputs`` [B, seq_len] (puzzle identifier
        0, as ``trm solve`` gives): answers int64 [steps, B, seq_len], q_halt and q_continue
        float32 [steps, B]."""
        rows = np.asarray(inputs, dtype=np.int64).reshape(-1, self.seq_len)
        feed = {"inputs": rows, "puzzle_identifiers": np.zeros(len(rows), dtype=np.int64)}
        answers, q_halt, q_continue = self._open().run(["answers", "q_halt", "q_continue"], feed)
        return answers, q_halt, q_continue

    def solve(self, puzzle: str | os.PathLike[str]) -> Solution:
        """Solve one puzzle (text in the task's format, or a :class:`pathlib.Path` of a file
        holding it), as :meth:`trm.api.model.Model.solve` does with its defaults (one
        attempt, the plain trajectory). TrmError for a malformed puzzle or one of another
        size, with ``trm solve``'s message (a shipped model's begins with what it solves)."""
        try:
            question = parse_puzzle(self.source, puzzle, self.seq_len)
        except TrmError as exc:
            solves = self.card["model"].get("puzzle")
            if not solves:
                raise
            raise TrmError(f"{self.name} solves {solves}: {exc}") from None
        answers, q_halt, q_continue = self.run_rows(question[None, :])
        steps = halt_steps(q_halt, q_continue, self.card["halt_rule"])
        return solution_of(
            self.source,
            question,
            answers[-1, 0],
            int(steps[0]),
            self.steps,
            step_tokens=answers[:, 0],
            step_q_halt=q_halt[:, 0],
        )


def data_source(pm: TrmPluginManager, name: str, card_path: Path) -> Any:
    """The data source called ``name`` among ``pm``'s; TrmError when none offers it."""
    for part in pm.hook.register_data_sources():
        for source in part or ():
            if source.name == name:
                return source
    raise TrmError(
        f"{card_path}: its task {name!r} has no data source here that runs without torch "
        "(a plugin of the trm.solvers entry-point group); install or switch on its plugin"
    )


def open_solver(pm: TrmPluginManager, path: Path) -> OnnxSolver:
    """The solver of ``path``: a solver folder, or a ``.onnx`` file with the card beside
    it. TrmError for a damaged card or a missing data source."""
    folder, model_file = (path.parent, path) if path.is_file() else (path, path / MODEL_FILE)
    if not (folder / CARD_FILE).is_file():
        raise TrmError(
            f"{path}: no {CARD_FILE} beside it; an ONNX solver is the folder `trm export MODEL "
            "--format onnx --out DIR` wrote (give DIR or DIR/model.onnx)"
        )
    card = read_card(folder)
    return OnnxSolver(folder, card, data_source(pm, card["task"], folder / CARD_FILE), model_file)
