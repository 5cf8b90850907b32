"""A wall-time budget: choose a run's steps from the speed measured on this machine.

When a spec sets ``train.time_budget_s``, ``trm run`` asks the plugins which recursion
depths the run will train at (``recursion_schedule``: the curriculum answers with its
stages; with no answer every step runs at the spec's depth), times a step at each depth with
the caller's timer, and chooses the most steps N whose schedule fits the budget:
``Σ fraction_i × N × step_s_i <= time_budget_s``, the fractions those of an N-step run. The
spec's ``train.max_steps`` becomes N, so the learning-rate schedule, the curriculum's stages
and the evaluations follow the plan.

The budget covers the training steps; evaluations and checkpoints come on top (about 3% for
sudoku9-laptop: 10 evaluations of 500 puzzles in a 30-minute run).

Who wins: a run resumed from a checkpoint in its directory keeps the steps its first start
planned (``budget.json``) and never times again; ``--max-steps N`` or ``--set
train.max_steps=N`` given by the user wins over the budget (no timing: the spec's
``max_steps`` is the schedule, and ``--max-steps`` stops the run at step N as always). A
budget too small for :data:`MIN_PLANNED_STEPS` steps is refused (TrmError) before the run's
data are built or anything is written.

The planner does not time anything itself: the caller passes a :data:`StepTimer` (the real
loop's, ``trm.measure.stage_speed.time_depths``; a test's fake), so this module stays below
the loop in the layers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import cattrs
from attrs import frozen

from trm.device import distributed
from trm.errors import TrmError
from trm.plan.pipeline import Plan
from trm.plan.run_dir import inspect_run_dir
from trm.plugin_manager import TrmPluginManager
from trm.recursion import RecursionShare
from trm.spec import RunSpec

BUDGET_RECORD = "budget.json"
MIN_PLANNED_STEPS = 10
MAX_STEPS = 2**40  # train.max_steps' range
FIRST_GUESS_STEPS = 10_000  # the total the schedule is first asked for, to know its depths

Depth = tuple[int, int]
Log = Callable[[str], None]
# (plan, depths to time, plugins to switch off while timing) -> seconds per step at each depth
StepTimer = Callable[[Plan, Sequence[Depth], Sequence[str]], dict[Depth, float]]


@frozen
class StageTime:
    """A share of the planned steps at one depth, and the measured seconds of one step there."""

    fraction: float
    H_cycles: int
    L_cycles: int
    step_s: float


@frozen
class BudgetPlan:
    """The steps chosen for ``budget_s`` seconds of training from the ``stages``' measured
    step times (what ``budget.json`` records)."""

    budget_s: float
    steps: int
    stages: tuple[StageTime, ...]

    @property
    def planned_s(self) -> float:
        """The training time the plan predicts: Σ fraction × steps × step_s."""
        return sum(s.fraction * self.steps * s.step_s for s in self.stages)

    def line(self) -> str:
        """The plan line ``trm run`` prints before training."""
        times = "/".join(f"{s.step_s:.2f}" for s in self.stages)
        text = (
            f"steps: {self.steps:,} planned for {describe_seconds(self.budget_s)} from "
            f"measured {times} s per step"
        )
        if len(self.stages) > 1:
            shares = ", ".join(
                f"{s.fraction:.0%} at ({s.H_cycles}, {s.L_cycles})" for s in self.stages
            )
            text += f" ({shares})"
        return text + " (train.time_budget_s)"

    def to_json(self) -> dict[str, Any]:
        return {"planned_s": round(self.planned_s, 1), **cattrs.unstructure(self)}


def describe_seconds(seconds: float) -> str:
    """``1800`` -> "30 min", ``90`` -> "90 s", ``5400`` -> "1 h 30 min"."""
    if seconds < 120 or seconds % 60:
        return f"{seconds:g} s"
    hours, minutes = divmod(int(seconds) // 60, 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def given_steps(max_steps: int | None, overrides: Sequence[str]) -> str | None:
    """What the user gave that fixes the steps (it wins over a budget), in words; None when
    nothing did. ``overrides`` are the ``--set KEY=VALUE`` texts."""
    if max_steps:
        return f"--max-steps {max_steps}"
    for text in overrides:
        key, _, value = text.partition("=")
        if key.strip() == "train.max_steps":
            return f"--set train.max_steps={value.strip()}"
    return None


def recursion_schedule(
    pm: TrmPluginManager, spec: RunSpec, total_steps: int
) -> list[RecursionShare]:
    """The depths a ``total_steps`` run of ``spec`` trains at (the plugins' answer, else the
    spec's depth throughout); TrmError for an answer that breaks the hook's contract."""
    shares = pm.hook.recursion_schedule(spec=spec, total_steps=total_steps)
    if not shares:
        return [RecursionShare(1.0, spec.arch.H_cycles, spec.arch.L_cycles)]
    total = sum(share.fraction for share in shares)
    if abs(total - 1.0) > 1e-6 or any(share.fraction < 0 for share in shares):
        raise TrmError(
            f"a plugin's recursion_schedule for {total_steps} steps has fractions summing to "
            f"{total:g}, not 1; switch the plugin off with --plugins no:NAME"
        )
    return [share for share in shares if share.fraction > 0]


class UntimedDepths(LookupError):
    """The schedule of some length trains at depths that were not timed (a schedule whose
    depths depend on the run's length): ``depths``, to time before planning again."""

    def __init__(self, depths: list[Depth]) -> None:
        super().__init__(f"depths not timed: {depths}")
        self.depths = depths


def steps_for_budget(
    budget_s: float, schedule_at: Callable[[int], list[RecursionShare]], step_s: dict[Depth, float]
) -> tuple[int, list[RecursionShare]]:
    """The most steps N whose schedule takes at most ``budget_s``: Σ fraction_i × N ×
    step_s_i with the shares of an N-step run (``schedule_at(N)``), found by bisection (the
    time grows with N); and the schedule at N. 0 when not even one step fits. Raises
    :class:`UntimedDepths` when a schedule the search looks at has a depth ``step_s`` lacks."""

    def seconds(total: int) -> float:
        schedule = schedule_at(total)
        missing = [d for d in _depths(schedule) if d not in step_s]
        if missing:
            raise UntimedDepths(missing)
        return sum(s.fraction * total * step_s[s.depth] for s in schedule)

    low, high = 0, 1
    while seconds(high) <= budget_s and high < MAX_STEPS:  # a power of two past the budget
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if seconds(middle) <= budget_s else (low, middle)
    return low, schedule_at(max(low, 1))


def read_budget_record(run_dir: Path) -> BudgetPlan | None:
    """The plan ``run_dir``'s first start recorded, or None when there is none."""
    try:
        data = json.loads((run_dir / BUDGET_RECORD).read_text())
    except (OSError, ValueError):
        return None
    data.pop("planned_s", None)
    try:
        return cattrs.structure(data, BudgetPlan)
    except (cattrs.BaseValidationError, TypeError, ValueError):
        return None


def write_budget_record(run_dir: Path, plan: BudgetPlan) -> None:
    """Record ``plan`` in ``run_dir`` (``budget.json``), once the run is accepted."""
    path = run_dir / BUDGET_RECORD
    path.write_text(json.dumps(plan.to_json(), indent=2) + "\n")


def plan_steps(
    pm: TrmPluginManager,
    plan: Plan,
    run_dir: Path,
    resume: str,
    given: str | None,
    timer: StepTimer,
    log: Log,
) -> tuple[Plan, BudgetPlan | None]:
    """``plan`` with ``train.max_steps`` chosen for the spec's ``train.time_budget_s`` (the
    plan unchanged when the budget is 0), and the budget plan to record when the run is
    accepted (None when nothing new was planned). Called by ``trm run`` on the first rank
    after planning, before the data are built. ``resume`` is ``--resume``; ``given`` what
    the user gave that fixes the steps (:func:`given_steps`); ``timer`` times a step at each
    depth. Prints the plan line through ``log``. TrmError for a budget too small, or under
    torchrun (one process's timing is not a data-parallel step's)."""
    spec = plan.spec
    budget_s = spec.train.time_budget_s
    if budget_s <= 0:
        return plan, None
    if resume != "never" and inspect_run_dir(run_dir).checkpoint_steps:
        recorded = read_budget_record(run_dir)
        if recorded is None:
            log(
                "steps: the run in this directory was started without a time-budget plan; "
                "its schedule is kept (train.time_budget_s is not used)"
            )
            return plan, None
        log(
            f"steps: {recorded.steps:,} planned at the run's first start for "
            f"{describe_seconds(recorded.budget_s)} ({BUDGET_RECORD}); a resume keeps them"
        )
        return _with_steps(plan, recorded.steps), None
    if given is not None:
        log(f"steps: {given} given, so the time budget (train.time_budget_s) is not used")
        return plan, None
    if distributed.current().distributed:
        raise TrmError(
            "train.time_budget_s is not planned under torchrun (one process's step time is "
            "not a data-parallel step's); give --max-steps or --set train.max_steps=N"
        )

    def schedule_at(total: int) -> list[RecursionShare]:
        return recursion_schedule(pm, spec, total)

    schedulers = [impl.plugin_name for impl in pm.hook.recursion_schedule.get_hookimpls()]
    first = schedule_at(FIRST_GUESS_STEPS)
    step_s = _checked(timer(plan, _depths(first), schedulers))
    while True:
        try:
            steps, schedule = steps_for_budget(budget_s, schedule_at, step_s)
            break
        except UntimedDepths as untimed:  # depths that depend on the length: time those too
            step_s |= _checked(timer(plan, untimed.depths, schedulers))
            if any(depth not in step_s for depth in untimed.depths):
                raise TrmError(
                    f"train.time_budget_s: the step timer gave no time for depth(s) "
                    f"{untimed.depths}; give --max-steps N"
                ) from None
    stages = tuple(StageTime(s.fraction, *s.depth, step_s[s.depth]) for s in schedule)
    if steps < MIN_PLANNED_STEPS:
        times = "/".join(f"{s.step_s:.3g}" for s in stages)
        raise TrmError(
            f"train.time_budget_s: {budget_s:g} s fits only {steps} step(s) at the measured "
            f"{times} s per step; a run needs at least {MIN_PLANNED_STEPS}: raise the budget "
            "or give --max-steps N"
        )
    budget = BudgetPlan(budget_s, steps, stages)
    log(budget.line())
    return _with_steps(plan, steps), budget


def _checked(step_s: dict[Depth, float]) -> dict[Depth, float]:
    """The timer's answer, refused unless every time is a positive number of seconds."""
    for depth, seconds in step_s.items():
        if not (math.isfinite(seconds) and seconds > 0):
            raise TrmError(
                f"train.time_budget_s: a step at depth {depth} measured {seconds!r} s; "
                "cannot plan from it: give --max-steps N"
            )
    return dict(step_s)


def _depths(schedule: list[RecursionShare]) -> list[Depth]:
    return list(dict.fromkeys(share.depth for share in schedule))


def _with_steps(plan: Plan, steps: int) -> Plan:
    spec = plan.spec
    return attrs.evolve(
        plan, spec=attrs.evolve(spec, train=attrs.evolve(spec.train, max_steps=steps))
    )
