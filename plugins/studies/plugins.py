"""The in-process plugins each trial of a study runs with (registered for that run only).

:class:`TrialPruning` reports each evaluation to the Optuna trial and stops a hopeless one;
:class:`WorkerShare` makes a trial plan with its worker's share of the machine, as the
``distributed`` plugin does for a torchrun rank.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from trm.control import TrainControl
from trm.hardware import HardwareProfile, merge_profiles
from trm.hookspecs import hookimpl
from trm.state import TrainState

# summary.json's ``stopped`` for a trial the pruner stopped
PRUNED = "pruned"
# summary.json's ``stopped`` for a trial another worker took over (its heartbeat lapsed)
TAKEN_OVER = "taken-over"


class TrialPruning:
    """After each evaluation: report ``field`` of the evaluation row to the Optuna ``trial``
    at the optimizer step; when the study's pruner says the trial is hopeless, say so and
    stop the run with a checkpoint (``stopped`` "pruned"). A trial the storage finished
    meanwhile (cut off by its lapsed heartbeat, queued for another worker) is stopped
    (``stopped`` "taken-over"). ``field`` None: nothing to report (the objective follows no
    evaluation)."""

    def __init__(self, trial: Any, field: str | None) -> None:
        self.trial = trial
        self.field = field

    @hookimpl
    def on_eval(self, state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
        value = metrics.get(self.field) if self.field else None
        if value is None:
            return
        import optuna

        try:
            self.trial.report(float(value), step=state.step)
        except optuna.exceptions.UpdateFinishedTrialError:
            control.log(
                f"trial {self.trial.number} was failed as cut off (its heartbeat lapsed) and "
                "is queued for another worker; stopping it here"
            )
            control.stop(TAKEN_OVER)
            return
        if self.trial.should_prune():
            control.log(
                f"trial {self.trial.number} pruned at step {state.step}: {self.field} "
                f"{value:.4g} is worse than the median of the other trials at this step"
            )
            control.stop(PRUNED)


class WorkerShare:
    """Plan with 1/``workers`` of this machine's cores and host memory budget (the other
    workers of the study take the rest)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    @hookimpl(wrapper=True)
    def detect_hardware(self) -> Generator[None, list[HardwareProfile | None], list]:
        parts = yield
        if self.workers == 1:
            return parts
        whole = merge_profiles(parts)
        cores = whole.physical_cores or whole.logical_cores
        share = max(1, cores // self.workers) if cores else None
        budget = whole.memory_budget_bytes
        part = HardwareProfile(
            physical_cores=share,
            logical_cores=share,
            memory_budget_bytes=budget // self.workers if budget is not None else None,
        )
        return [part, *parts]
