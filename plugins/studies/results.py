"""What a study holds: its trials as rows (parameters, objective, state, wall time, run
directory) and the best one — what ``trm sweep`` prints and ``trm report DIR`` draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs


@attrs.frozen
class TrialRow:
    """One trial: its ``number``, ``state`` ("complete", "pruned", "fail", "running",
    "waiting"), ``value`` (the objective; None unless complete), ``params``, ``run_dir``,
    ``wall_s`` (seconds of training), ``error`` (a failed trial's line; for a trial cut off
    and queued again, the number of the trial that ran it again), ``command`` (the
    ``trm run`` that trains it again) and ``last_reported`` (the last evaluation value the
    pruner saw, with its step: where a pruned trial stood)."""

    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    run_dir: str | None
    wall_s: float | None
    error: str | None
    command: str | None
    last_reported: tuple[int, float] | None = None


@attrs.frozen
class StudyResult:
    """A study as it stands: ``name``, ``out_dir``, ``direction``, ``metric`` (the study
    file's objective), the ``trials`` in order and the ``best`` complete one (None: none)."""

    name: str
    out_dir: Path
    direction: str
    metric: str
    trials: tuple[TrialRow, ...]
    best: TrialRow | None

    def counts(self) -> dict[str, int]:
        """Trials per state."""
        counted: dict[str, int] = {}
        for row in self.trials:
            counted[row.state] = counted.get(row.state, 0) + 1
        return counted

    def document(self) -> dict[str, Any]:
        """The JSON document ``trm sweep --json`` prints."""
        return {
            "study": self.name,
            "out_dir": str(self.out_dir),
            "direction": self.direction,
            "metric": self.metric,
            "counts": self.counts(),
            "best": attrs.asdict(self.best) if self.best else None,
            "trials": [attrs.asdict(row) for row in self.trials],
        }

    def table(self) -> str:
        """The trials as the table ``trm sweep`` prints."""
        keys = sorted({key for row in self.trials for key in row.params})
        header = ["trial", "state", self.metric, *keys, "wall s"]
        lines = [header]
        for row in self.trials:
            value = "" if row.value is None else f"{row.value:.4g}"
            wall = "" if row.wall_s is None else f"{row.wall_s:.0f}"
            lines.append(
                [str(row.number), row.state, value, *(_cell(row.params.get(k)) for k in keys), wall]
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        )


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _last(values: dict[int, float]) -> tuple[int, float] | None:
    if not values:
        return None
    step = max(values)
    return step, float(values[step])


def read_study_result(study: Any, out_dir: Path) -> StudyResult:
    """The rows of an Optuna ``study`` whose trials ran into ``out_dir``."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    # a trial cut off (its worker died) and queued again: the number of its retry
    retried_as = {
        number: trial.number
        for trial in trials
        for number in trial.system_attrs.get("retry_history", [])[-1:]
    }
    rows = []
    for trial in trials:
        attrs_ = trial.user_attrs
        error = attrs_.get("error")
        if trial.state == TrialState.FAIL and trial.number in retried_as:
            error = f"cut off; run again as trial {retried_as[trial.number]}"
        rows.append(
            TrialRow(
                number=trial.number,
                state=trial.state.name.lower(),
                value=trial.value if trial.state == TrialState.COMPLETE else None,
                params=dict(trial.params),
                run_dir=attrs_.get("run_dir"),
                wall_s=attrs_.get("wall_s"),
                error=error,
                command=attrs_.get("command"),
                last_reported=_last(trial.intermediate_values),
            )
        )
    complete = [row for row in rows if row.state == "complete" and row.value is not None]
    direction = study.direction.name.lower()
    best = None
    if complete:
        pick = max if direction == "maximize" else min
        best = pick(complete, key=lambda row: row.value)
    return StudyResult(
        name=study.study_name,
        out_dir=out_dir,
        direction=direction,
        metric=str(study.user_attrs.get("metric", "objective")),
        trials=tuple(rows),
        best=best,
    )
