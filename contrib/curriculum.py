"""Curriculum recursion: train with a shallow recursion first, deepening to the spec's.

A research idea, opt-in (``--plugins curriculum``). The spec's ``arch.H_cycles`` /
``arch.L_cycles`` are the final, deepest depth; before it the plugin asks the loop, through
``control.set_recursion_depth``, for a shallower one, as a function of the step only (so a
resumed run continues exactly). Two schedules, chosen in ``[plugins.curriculum]``:

- ``linear`` (the default): from ``(start_H_cycles, start_L_cycles)`` at step 0, each of H and
  L grows linearly (rounded down) to the spec's value, reached at ``end_step`` (or at
  ``end_fraction`` of the run's total steps);
- ``staged`` (CGAR, arXiv 2511.08653): ``stages`` give a depth until a fraction of the total
  steps each, then the spec's depth.

The defaults follow CGAR, whose depths are thirds of the paper's (3, 6): the linear schedule
starts, and the staged one's first stage is, a third of the spec's depth — (1, 2) for (3, 6) —
until 30%; the staged one's second stage is two thirds — (2, 4) — until 60%. A third is
rounded half up, and at least 1.

A depth deeper than the spec's is refused: the memory estimate plans for the spec's depth,
which is the deepest any stage reaches. CGAR's other half, weighting supervision step t by
0.7^t in the loss, is not done: it needs a per-row weight inside the step's loss, which no
``control`` request can set between steps (docs/contrib.md).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from attrs import frozen

from trm import hookimpl
from trm.contrib.options import RunPosition, StepSchedule, end_step, read_table, refuse
from trm.control import TrainControl
from trm.recursion import RecursionShare
from trm.spec import RunSpec

NAME = "curriculum"
SCHEDULES = ("linear", "staged")
LINEAR_KEYS = ("start_H_cycles", "start_L_cycles", "end_fraction", "end_step")
STAGED_KEYS = ("stages",)
Depth = tuple[int, int]


@frozen
class Stage:
    """Depth ``(H_cycles, L_cycles)`` while ``step < round(until_fraction × total steps)``."""

    until_fraction: float
    H_cycles: int
    L_cycles: int


def share_of(depth: Depth, thirds: int) -> Depth:
    """``thirds``/3 of ``depth``, each rounded half up and at least 1."""
    return (
        max(1, (2 * depth[0] * thirds + 3) // 6),
        max(1, (2 * depth[1] * thirds + 3) // 6),
    )


def cgar_stages(final: Depth) -> tuple[Stage, ...]:
    """CGAR's stages scaled to ``final``: a third of it until 30%, two thirds until 60% —
    (1, 2) and (2, 4) for the paper's (3, 6); the third stage is ``final`` itself."""
    first, second = share_of(final, 1), share_of(final, 2)
    return (Stage(0.3, *first), Stage(0.6, *second))


@frozen
class CurriculumOptions:
    """``[plugins.curriculum]``; see the module docstring. Keys of the schedule not chosen
    are refused, so a table says only what it does."""

    schedule: str = "linear"
    start_H_cycles: int = 0  # 0: a third of the spec's H_cycles
    start_L_cycles: int = 0  # 0: a third of the spec's L_cycles
    end_fraction: float = 0.5
    end_step: int = 0
    stages: tuple[Stage, ...] | None = None  # None: CGAR's, scaled to the spec's depth

    def stages_for(self, final: Depth) -> tuple[Stage, ...]:
        """The staged schedule's stages before ``final``: as given, else CGAR's."""
        return self.stages if self.stages is not None else cgar_stages(final)

    def start_for(self, final: Depth) -> Depth:
        """The linear schedule's first depth: as given, else a third of ``final``."""
        default = share_of(final, 1)
        return (self.start_H_cycles or default[0], self.start_L_cycles or default[1])

    def depth_at(self, step: int, total_steps: int, final: Depth) -> tuple[Depth, str]:
        """The depth for the step of index ``step`` (0-based) of a ``total_steps`` run whose
        final depth is ``final``, and the reason in words. Never deeper than ``final``."""
        if self.schedule == "staged":
            stages = self.stages_for(final)
            for number, stage in enumerate(stages, start=1):
                until = round(stage.until_fraction * total_steps)
                if step < until:
                    depth = (min(stage.H_cycles, final[0]), min(stage.L_cycles, final[1]))
                    return depth, f"curriculum stage {number} of {len(stages) + 1}"
            return final, f"curriculum stage {len(stages) + 1} of {len(stages) + 1}"
        end = end_step(self.end_fraction, self.end_step, total_steps)
        if step >= end:
            return final, f"curriculum at the spec's depth from step {end}"
        first = self.start_for(final)
        start = (min(first[0], final[0]), min(first[1], final[1]))
        depth = (
            start[0] + (final[0] - start[0]) * step // end,
            start[1] + (final[1] - start[1]) * step // end,
        )
        return depth, f"curriculum, linear to {final} by step {end}"

    def steps_per_depth(self, total_steps: int, final: Depth) -> list[tuple[int, Depth]]:
        """``(steps, depth)`` in step order for a ``total_steps`` run: how many steps
        :meth:`depth_at` gives each depth (adjacent equal depths merged; steps sum to
        ``total_steps``). Found from the steps where the depth can change, not step by step,
        so it costs the same for any length."""
        starts = {0}
        if self.schedule == "staged":
            stages = self.stages_for(final)
            starts |= {round(stage.until_fraction * total_steps) for stage in stages}
        else:
            end = end_step(self.end_fraction, self.end_step, total_steps)
            first = self.start_for(final)
            starts.add(end)
            for start, top in zip(first, final, strict=True):
                rise = top - min(start, top)
                # the depth start + rise * step // end passes start + k at step ceil(k*end/rise)
                starts |= {-(-k * end // rise) for k in range(1, rise)}
        shares: list[tuple[int, Depth]] = []
        bounds = [*sorted(step for step in starts if 0 <= step < total_steps), total_steps]
        for begin, stop in pairwise(bounds):
            depth = self.depth_at(begin, total_steps, final)[0]
            if shares and shares[-1][1] == depth:
                shares[-1] = (shares[-1][0] + stop - begin, depth)
            else:
                shares.append((stop - begin, depth))
        return shares


def problems_with(options: CurriculumOptions, given: dict[str, Any], spec: RunSpec) -> list[str]:
    """Every impossible value of ``options`` (``given``: the table as written) for ``spec``."""
    key = f"plugins.{NAME}"
    arch = spec.arch
    problems: list[str] = []
    if options.schedule not in SCHEDULES:
        problems.append(f"{key}.schedule: must be one of {SCHEDULES}, got {options.schedule!r}")
        return problems
    other = STAGED_KEYS if options.schedule == "linear" else LINEAR_KEYS
    problems += [
        f"{key}.{name}: belongs to the other schedule, not {options.schedule!r}; remove it"
        for name in other
        if name in given
    ]
    if options.schedule == "linear":
        for name, value, top, spec_key in (
            ("start_H_cycles", options.start_H_cycles, arch.H_cycles, "arch.H_cycles"),
            ("start_L_cycles", options.start_L_cycles, arch.L_cycles, "arch.L_cycles"),
        ):
            if not 0 <= value <= top:
                problems.append(
                    f"{key}.{name}: {value} must be between 1 and {spec_key}={top} (the "
                    "curriculum grows to the spec's depth), or 0 for a third of it"
                )
        if not 0 < options.end_fraction <= 1:
            problems.append(f"{key}.end_fraction: {options.end_fraction} must be in (0, 1]")
        if options.end_step < 0:
            problems.append(
                f"{key}.end_step: {options.end_step} must be 0 (use end_fraction) or more"
            )
        return problems
    if options.stages is None:
        return problems  # CGAR's, scaled to the spec's depth
    if not options.stages:
        problems.append(f"{key}.stages: give at least one stage (or leave it out for CGAR's)")
    previous = 0.0
    for index, stage in enumerate(options.stages):
        where = f"{key}.stages[{index}]"
        if not previous < stage.until_fraction <= 1:
            problems.append(
                f"{where}.until_fraction: {stage.until_fraction} must be in ({previous:g}, 1] "
                "(stages in order, each ending later)"
            )
        previous = max(previous, stage.until_fraction)
        if not 1 <= stage.H_cycles <= arch.H_cycles:
            problems.append(
                f"{where}.H_cycles: {stage.H_cycles} must be between 1 and arch.H_cycles="
                f"{arch.H_cycles} (the last stage is the spec's depth, the deepest)"
            )
        if not 1 <= stage.L_cycles <= arch.L_cycles:
            problems.append(
                f"{where}.L_cycles: {stage.L_cycles} must be between 1 and arch.L_cycles="
                f"{arch.L_cycles} (the last stage is the spec's depth, the deepest)"
            )
    return problems


def read_options(spec: RunSpec) -> CurriculumOptions:
    """``[plugins.curriculum]`` of ``spec``, structured and checked (TrmError naming the key)."""
    options = read_table(spec, NAME, CurriculumOptions)
    refuse(problems_with(options, dict(spec.plugins.get(NAME, {})), spec))
    return options


class Curriculum(StepSchedule[CurriculumOptions]):
    """Curriculum recursion: shallow H/L cycles first, growing to the spec's depth."""

    def __init__(self) -> None:
        super().__init__(CurriculumOptions())

    def read_options(self, spec: RunSpec) -> CurriculumOptions:
        return read_options(spec)

    def starting(self, state: RunPosition, control: TrainControl) -> None:
        o = self.options
        end = end_step(o.end_fraction, o.end_step, state.total_steps)
        if o.schedule == "linear" and end > state.total_steps:
            control.log(
                f"warning: plugins.{NAME}.end_step {end} is past the run's last step "
                f"{state.total_steps}: the run never reaches the spec's depth"
            )

    def ask(self, state: RunPosition, control: TrainControl) -> None:
        """Ask for the depth of the step the loop takes next (index ``state.step``)."""
        final = (state.spec.arch.H_cycles, state.spec.arch.L_cycles)
        (H_cycles, L_cycles), reason = self.options.depth_at(state.step, state.total_steps, final)
        control.set_recursion_depth(H_cycles, L_cycles, reason)

    @hookimpl
    def recursion_schedule(self, spec: RunSpec, total_steps: int) -> list[RecursionShare]:
        """The depths :meth:`ask` will request in a ``total_steps`` run, as step shares."""
        final = (spec.arch.H_cycles, spec.arch.L_cycles)
        return [
            RecursionShare(steps / total_steps, H_cycles, L_cycles)
            for steps, (H_cycles, L_cycles) in read_options(spec).steps_per_depth(
                total_steps, final
            )
        ]
