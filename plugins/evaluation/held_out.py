"""Scoring a model on held-out puzzles generated again from their recipe (source, options,
seed), for shipped models: ``trm eval NAME`` and benchmarks/shipped_weights.py.

A *kind* of puzzle is a data source's full generate options and a build seed. The source's
``build`` is deterministic for those, so its test split — the held-out puzzles — is the same
on every machine: the kind a manifest records is scored again exactly. A kind whose options
and seed are the training run's own is the run's own test split (puzzles the build kept out
of train); a kind with another seed is fresh puzzles of that kind.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from attrs import define, field

from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.device.contract import Placement
from trm.errors import TrmError
from trm.evaluation.attempts import AttemptPlan, at_attempts_key
from trm.evaluation.evaluate import evaluate
from trm.evaluation.explore import CURVE_PREFIX, Exploration
from trm.plan.dataset import build_options, find_data_source
from trm.plugin_manager import TrmPluginManager
from trm.restore import check_eval_data
from trm.shipped import KindAccuracy
from trm.spec import CONVERTER, RunSpec


@define(frozen=True)
class KindScore:
    """A model's score on the first ``examples`` held-out puzzles of one kind (fractions);
    ``exact_accuracy_at_attempts`` with the attempts asked for (None: one attempt);
    ``oracle_exact_accuracy`` with exploration (None without): right when any trajectory
    is; the rows run and the wall time of the scoring (not of the generation) per puzzle;
    ``curve`` the exploration's per-N figures of every usable rule and the oracle."""

    examples: int
    exact_accuracy: float
    cell_accuracy: float
    exact_accuracy_at_attempts: float | None = None
    oracle_exact_accuracy: float | None = None
    trajectories_per_puzzle: float = 1.0
    seconds_per_puzzle: float = 0.0
    curve: dict[str, float] = field(factory=dict)


def manifest_at_attempts(kind: KindAccuracy, attempts: AttemptPlan) -> float | None:
    """The exact accuracy ``kind`` records for these attempts and their seed (None: it
    records none)."""
    for retried in kind.retried:
        if retried.attempts == attempts.attempts and retried.attempts_seed == attempts.seed:
            return retried.exact_accuracy
    return None


def kind_options(
    pm: TrmPluginManager, spec: RunSpec, overrides: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """The full generate options of a kind: the run's ``[data.generate]`` with ``overrides``
    applied, checked by the source's options class (TrmError naming ``where`` and the key)."""
    source = find_data_source(pm, spec.data.source)
    options = build_options(source, {**spec.data.generate, **dict(overrides)}, where)
    return CONVERTER.unstructure(options)


def score_kind(
    pm: TrmPluginManager,
    payload: dict[str, Any],
    spec: RunSpec,
    model: torch.nn.Module,
    placement: Placement,
    options: Mapping[str, Any],
    seed: int,
    count: int,
    batch_size: int,
    log: Callable[[str], None],
    where: str,
    attempts: AttemptPlan | None = None,
    exploration: Exploration | None = None,
) -> KindScore:
    """Build the kind's dataset (``spec``'s source, ``options``, ``seed``) in a temporary
    folder and score ``model`` (restored from ``payload``) on the first ``count`` examples
    of its eval split, running every supervision step as ``trm eval`` does.

    TrmError (naming ``where``) when the options do not parse or the built data do not fit
    the model (another puzzle size). ``attempts`` (more than one) adds the exact accuracy
    with them (:mod:`trm.evaluation.attempts`); ``exploration`` answers each puzzle with its
    rule's choice among the trajectories (:mod:`trm.evaluation.explore`).
    """
    source = find_data_source(pm, spec.data.source)
    built = build_options(source, dict(options), where)
    validate = getattr(source, "validate_options", None)
    if callable(validate):
        validate(built)
    split = spec.data.eval_split
    with tempfile.TemporaryDirectory(prefix="trm-held-out-") as tmp:
        folder = Path(tmp)
        source.build(built, folder, seed, log)
        try:
            check_eval_data(payload, folder, split, given=False)
        except TrmError as exc:
            raise TrmError(f"{where}: {exc}") from None
        index = SplitIndex(open_split(folder / split))
        started_s = time.perf_counter()
        result = evaluate(
            model,
            index,
            spec.arch.halt_max_steps,
            batch_size,
            placement,
            max_examples=count,
            attempts=attempts,
            exploration=exploration,
        )
        elapsed_s = time.perf_counter() - started_s
    retried = None
    if attempts is not None and attempts.attempts > 1:
        retried = float(result[at_attempts_key(attempts.attempts)])
    return KindScore(
        examples=int(result["examples"]),
        exact_accuracy=float(result["exact_accuracy"]),
        cell_accuracy=float(result["cell_accuracy"]),
        exact_accuracy_at_attempts=retried,
        oracle_exact_accuracy=result.get("oracle_exact_accuracy"),
        trajectories_per_puzzle=float(result.get("trajectories_per_puzzle", 1.0)),
        seconds_per_puzzle=elapsed_s / max(int(result["examples"]), 1),
        curve={k: float(v) for k, v in result.items() if k.startswith(CURVE_PREFIX)},
    )
