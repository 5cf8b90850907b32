"""Adaptive halting: anneal the halting exploration probability over training.

A research idea, opt-in (``--plugins adaptive-halting``); no published result exists for it.
In training, with probability ``arch.halt_exploration_prob`` a row is held to a random
minimum number of supervision steps before the Q head may halt it (the reference's
exploration). This plugin replaces the spec's constant with a linear anneal from
``start_prob`` at step 0 to ``final_prob`` at ``end_step`` (or ``end_fraction`` of the run's
total steps), then constant — asked of the loop through ``control.set_halt_exploration``, as
a function of the step only, so a resumed run continues exactly. Configured in
``[plugins.adaptive-halting]``.
"""

from __future__ import annotations

from attrs import frozen

from trm.contrib.options import RunPosition, StepSchedule, end_step, read_table, refuse
from trm.control import TrainControl
from trm.spec import RunSpec

NAME = "adaptive-halting"


@frozen
class AdaptiveHaltingOptions:
    """``[plugins.adaptive-halting]``; see the module docstring."""

    start_prob: float = 0.3
    final_prob: float = 0.05
    end_fraction: float = 1.0
    end_step: int = 0

    def probability_at(self, step: int, total_steps: int) -> float:
        """The exploration probability for the step of index ``step`` (0-based)."""
        end = end_step(self.end_fraction, self.end_step, total_steps)
        if step >= end:
            return self.final_prob
        value = self.start_prob + (self.final_prob - self.start_prob) * step / end
        return min(1.0, max(0.0, value))


def problems_with(options: AdaptiveHaltingOptions) -> list[str]:
    """Every impossible value of ``options``, as ``plugins.adaptive-halting.KEY: why``."""
    key = f"plugins.{NAME}"
    problems = [
        f"{key}.{name}: {value} must be in [0, 1] (a probability)"
        for name, value in (("start_prob", options.start_prob), ("final_prob", options.final_prob))
        if not 0.0 <= value <= 1.0
    ]
    if not 0 < options.end_fraction <= 1:
        problems.append(f"{key}.end_fraction: {options.end_fraction} must be in (0, 1]")
    if options.end_step < 0:
        problems.append(f"{key}.end_step: {options.end_step} must be 0 (use end_fraction) or more")
    return problems


def read_options(spec: RunSpec) -> AdaptiveHaltingOptions:
    """``[plugins.adaptive-halting]`` of ``spec``, structured and checked."""
    options = read_table(spec, NAME, AdaptiveHaltingOptions)
    refuse(problems_with(options))
    return options


class AdaptiveHalting(StepSchedule[AdaptiveHaltingOptions]):
    """Adaptive halting: anneal the halting exploration probability over training."""

    def __init__(self) -> None:
        super().__init__(AdaptiveHaltingOptions())

    def read_options(self, spec: RunSpec) -> AdaptiveHaltingOptions:
        return read_options(spec)

    def ask(self, state: RunPosition, control: TrainControl) -> None:
        """Ask for the probability of the step the loop takes next (index ``state.step``)."""
        probability = self.options.probability_at(state.step, state.total_steps)
        control.set_halt_exploration(probability, f"{NAME} anneal")
