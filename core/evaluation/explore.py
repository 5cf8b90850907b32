"""Test-time exploration: N trajectories of each puzzle in one batch, one answer chosen.

``--explore N`` runs every puzzle N times as rows of one batch (puzzle-major: puzzle ``p``'s
trajectories are rows ``p*N .. p*N+N-1``), so each supervision step is one batched forward
for all of them. Trajectory 0 runs the plain recursion; the others add Gaussian noise of
standard deviation ``--noise`` to the reasoning latent ``z_L`` at the start of every full
recursion (:mod:`trm.model.latent_noise`), drawn from a generator seeded with
``--explore-seed``, so the same command gives the same answers. A selection rule
(:mod:`trm.data.selection`) then picks one trajectory per puzzle. With one trajectory
nothing is added, drawn or selected: the answers are exactly those of a plain run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from attrs import define, frozen

from trm.data.selection import (
    CURVE_PREFIX,
    ORACLE,
    Candidates,
    SelectionRule,
    checked_pick,
    find_selection_rule,
    offered_rules,
    rules_judge_answers,
)
from trm.data.symmetry import check_seed
from trm.device.contract import Placement
from trm.errors import TrmError
from trm.evaluation.attempts import RunPuzzles
from trm.evaluation.steps import exact_rows, run_all_steps
from trm.model.latent_noise import LatentNoise, noise_generator

# At most this many trajectories of a puzzle (as train.eval_attempts' bound).
MAX_TRAJECTORIES = 1024
# The noise's standard deviation when none is given: the latent's cells are RMS-normalised
# (about 1), so 0.3 is about a third of a typical cell. Chosen on 100 fresh minimal 9x9
# puzzles, where it matched or beat 0.03, 0.1 and 1.0 for every rule at every N
# (benchmarks/results/explore_sudoku9_laptop_minimal_choose.json; docs/test-time.md).
DEFAULT_NOISE = 0.3
# The largest standard deviation accepted (far beyond any useful one: the latent is ~1).
MAX_NOISE = 100.0


@frozen
class Exploration:
    """``trajectories`` runs of each puzzle, noise ``noise`` (standard deviation) in all but
    the first, seeded with ``seed``; ``rule`` picks the answer (None only with one
    trajectory: the plain run); ``curve_rules`` are the rules
    an evaluation also scores at every N = 1, 2, 4, … up to ``trajectories`` (with the
    oracle); ``check`` is the task's rules when they judge answers from the question."""

    trajectories: int = 1
    noise: float = DEFAULT_NOISE
    rule: SelectionRule | None = None
    seed: int = 0
    curve_rules: tuple[SelectionRule, ...] = ()
    check: Callable[[np.ndarray, np.ndarray], bool] | None = None

    @property
    def explores(self) -> bool:
        return self.trajectories > 1


def task_noise(source: Any, noise: Any) -> Any:
    """``noise`` as given, or where it is None the task's own default (its data source's
    ``default_noise``), else :data:`DEFAULT_NOISE`."""
    if noise is not None:
        return noise
    own = getattr(source, "default_noise", None)
    return DEFAULT_NOISE if own is None else float(own)


def check_exploration(trajectories: Any, noise: Any, seed: Any, where: str = "--") -> None:
    """TrmError unless ``trajectories`` is a whole number in 1..MAX_TRAJECTORIES, ``noise`` a
    finite number in 0..MAX_NOISE (or None: the task's default, :func:`task_noise`) and
    ``seed`` a seed; ``where`` prefixes the option names (``--`` for ``--explore``, ``""`` for
    ``Model.solve``'s ``explore=``)."""
    name = f"{where}explore"
    if isinstance(trajectories, bool) or not isinstance(trajectories, (int, np.integer)):
        raise TrmError(f"{name} must be a whole number of trajectories, not {trajectories!r}")
    if not 1 <= trajectories <= MAX_TRAJECTORIES:
        raise TrmError(
            f"{name} must be 1 to {MAX_TRAJECTORIES} trajectories (1: the plain answer), "
            f"got {trajectories}"
        )
    if noise is not None:
        check_noise(noise, where)
    check_seed(seed, f"{where}explore{'-' if where else '_'}seed")


def check_noise(noise: Any, where: str) -> None:
    """TrmError unless ``noise`` is a finite number in 0..MAX_NOISE."""
    if isinstance(noise, bool) or not isinstance(noise, (int, float, np.floating, np.integer)):
        raise TrmError(f"{where}noise must be a number (a standard deviation), not {noise!r}")
    if not (math.isfinite(float(noise)) and 0.0 <= float(noise) <= MAX_NOISE):
        raise TrmError(f"{where}noise must be between 0 and {MAX_NOISE:g}, got {noise!r}")


def plan_exploration(
    pm: Any,
    source: Any,
    trajectories: int,
    noise: float | None,
    select: str | None,
    seed: int,
    where: str = "--",
) -> Exploration:
    """The exploration asked for, checked (:func:`check_exploration`; the rule by
    :func:`trm.data.selection.find_selection_rule`, None: the task's default; the noise
    likewise, None: the task's, :func:`task_noise`; with one trajectory and no rule named,
    none is looked up)."""
    check_exploration(trajectories, noise, seed, where)
    noise = task_noise(source, noise)
    if trajectories == 1 and not select:  # the plain run: no rule is asked for
        return Exploration(1, float(noise), None, int(seed))
    rule = find_selection_rule(pm, select, source, f"{where}select")
    judged = rules_judge_answers(source)
    usable = tuple(
        r for name, r in sorted(offered_rules(pm).items()) if judged or not r.needs_rules
    )
    return Exploration(
        trajectories=int(trajectories),
        noise=float(noise),
        rule=rule,
        seed=int(seed),
        curve_rules=usable,
        check=source.check_answer if judged else None,
    )


def eval_exploration(pm: Any, spec: Any, source: Any) -> Exploration:
    """The exploration of a run's evaluations (``train.eval_explore``, ``eval_noise``,
    ``eval_select``; the noise drawn from ``train.seed``); TrmError naming the key."""
    train = spec.train
    where = "train.eval_"
    return plan_exploration(
        pm, source, train.eval_explore, train.eval_noise, train.eval_select or None, 0, where
    )


def curve_sizes(trajectories: int) -> list[int]:
    """1, 2, 4, … below ``trajectories``, then ``trajectories``."""
    sizes, size = [], 1
    while size < trajectories:
        sizes.append(size)
        size *= 2
    return [*sizes, trajectories]


@frozen
class Explored:
    """One batch explored: per puzzle ``answers`` [B, N, seq_len], ``halt_steps`` [B, N],
    ``q_halt`` [B, N] (NumPy), ``chosen`` [B] the selected trajectories; ``outputs`` and
    ``first_halt_steps`` are trajectory 0's model outputs (device tensors) and halting steps,
    those of a plain run."""

    answers: np.ndarray
    halt_steps: np.ndarray
    q_halt: np.ndarray
    chosen: np.ndarray
    outputs: dict[str, torch.Tensor]
    first_halt_steps: torch.Tensor
    max_steps: int

    @property
    def selected(self) -> np.ndarray:
        """The chosen answers [B, seq_len]."""
        return self.answers[np.arange(len(self.chosen)), self.chosen]

    @property
    def selected_halt_steps(self) -> np.ndarray:
        return self.halt_steps[np.arange(len(self.chosen)), self.chosen]

    @property
    def selected_q_halt(self) -> np.ndarray:
        return self.q_halt[np.arange(len(self.chosen)), self.chosen]

    def candidates(self, row: int, question: np.ndarray, check: Any) -> Candidates:
        return Candidates(
            question=np.asarray(question),
            answers=self.answers[row],
            halt_steps=self.halt_steps[row],
            q_halt=self.q_halt[row],
            max_steps=self.max_steps,
            check=check,
        )


@define
class Explorer:
    """The exploration of one command or evaluation: its noise generator (seeded once, so
    a puzzle's trajectories depend only on the command and the puzzle's place in it) and the
    trajectories it ran (``rows_run``)."""

    exploration: Exploration
    placement: Placement
    generator: torch.Generator | None = None
    rows_run: int = 0

    def run(
        self, model: torch.nn.Module, batch: dict[str, torch.Tensor], halt_max_steps: int
    ) -> Explored:
        """Every supervision step of ``batch``'s puzzles, N trajectories each in one batch,
        and the rule's choice (see the module docstring)."""
        n = self.exploration.trajectories
        puzzles = int(batch["inputs"].shape[0])
        self.rows_run += puzzles * n
        if n == 1:
            outputs, halt_steps = run_all_steps(model, batch, halt_max_steps, self.placement)
            trajectory_outputs, first_steps = outputs, halt_steps
        else:
            rows = {key: value.repeat_interleave(n, dim=0) for key, value in batch.items()}
            with trm_model(model).latent_noise_on(self._noise(puzzles, n)):
                outputs, halt_steps = run_all_steps(model, rows, halt_max_steps, self.placement)
            trajectory_outputs = {key: value[::n] for key, value in outputs.items()}
            first_steps = halt_steps[::n]
        answers = outputs["logits"].argmax(dim=-1).cpu().numpy()
        explored = Explored(
            answers=answers.reshape(puzzles, n, -1),
            halt_steps=halt_steps.cpu().numpy().reshape(puzzles, n),
            q_halt=outputs["q_halt_logits"].float().cpu().numpy().reshape(puzzles, n),
            chosen=np.zeros(puzzles, dtype=np.int64),
            outputs=trajectory_outputs,
            first_halt_steps=first_steps,
            max_steps=halt_max_steps,
        )
        if n > 1:
            assert self.exploration.rule is not None, "an exploration needs a selection rule"
            questions = batch["inputs"].cpu().numpy()
            for p in range(puzzles):
                candidates = explored.candidates(p, questions[p], self.exploration.check)
                explored.chosen[p] = checked_pick(self.exploration.rule, candidates)
        return explored

    def _noise(self, puzzles: int, n: int) -> LatentNoise:
        device = self.placement.device
        if self.generator is None:
            self.generator = noise_generator(torch.device(device), self.exploration.seed)
        scale = torch.full((puzzles, n), self.exploration.noise, dtype=torch.float32)
        scale[:, 0] = 0.0  # trajectory 0: the plain recursion
        return LatentNoise(scale.reshape(-1).to(device), self.generator)

    def puzzle_runner(
        self, model: torch.nn.Module, halt_max_steps: int, batch_size: int
    ) -> RunPuzzles:
        """The explored model as :data:`trm.evaluation.attempts.RunPuzzles` (each attempt
        explores): the chosen answers and their halting steps, at most ``batch_size`` rows
        (puzzles × trajectories) a batch."""
        puzzles_per_batch = puzzles_in_batch(batch_size, self.exploration.trajectories)

        def run(inputs: np.ndarray, identifiers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            answers, steps = [], []
            for start in range(0, len(inputs), puzzles_per_batch):
                rows = slice(start, start + puzzles_per_batch)
                batch = {"inputs": inputs[rows], "labels": inputs[rows]}
                batch = self.placement.to_device({**batch, "puzzle_identifiers": identifiers[rows]})
                explored = self.run(model, batch, halt_max_steps)
                answers.append(explored.selected)
                steps.append(explored.selected_halt_steps)
            return np.concatenate(answers), np.concatenate(steps)

        return run


def puzzles_in_batch(batch_size: int, trajectories: int) -> int:
    """Puzzles per batch so that a batch holds at most ``batch_size`` rows (at least one
    puzzle)."""
    return max(1, int(batch_size) // max(int(trajectories), 1))


def trm_model(model: torch.nn.Module) -> Any:
    """The TinyRecursiveModel inside ``model`` (a data-parallel wrapper keeps it on
    ``.module``)."""
    return model if hasattr(model, "latent_noise_on") else model.module


def curve_sums(
    explored: Explored, questions: np.ndarray, labels: np.ndarray, exploration: Exploration
) -> dict[str, float]:
    """Per N = 1, 2, 4, … up to the trajectories, the puzzles exactly right with each of
    ``exploration.curve_rules`` choosing among the first N trajectories, and with the oracle
    (right when any of them is), as sums keyed ``explore@N/RULE``."""
    puzzles, n = explored.answers.shape[:2]
    repeated = np.repeat(np.asarray(labels), n, axis=0)
    right = exact_rows(explored.answers.reshape(puzzles * n, -1), repeated).reshape(puzzles, n)
    sums: dict[str, float] = {}
    for size in curve_sizes(n):
        prefix = f"{CURVE_PREFIX}{size}/"
        sums[prefix + ORACLE] = float(right[:, :size].any(axis=1).sum())
        for rule in exploration.curve_rules:
            hits = 0.0
            for p in range(puzzles):
                candidates = explored.candidates(p, questions[p], exploration.check).first(size)
                hits += float(right[p, checked_pick(rule, candidates)])
            sums[prefix + rule.name] = hits
    return sums
