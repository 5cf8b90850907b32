"""What the contrib schedule plugins share: reading their own spec table strictly, the step
at which a schedule ends, and the plugin skeleton that asks for a value before every step.

A plugin's settings live in the run spec as ``[plugins.NAME]``, which the core passes through
as plain TOML data (``RunSpec.plugins``). :func:`read_table` structures that table into the
plugin's attrs class with the same strict converter as the rest of the spec, so an unknown
key, a wrong type or an impossible value is a :class:`trm.errors.TrmError` naming
``plugins.NAME.KEY``. Nothing here imports the loop, the planner or the model: the plugins act
only through :class:`trm.control.TrainControl`.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from trm import hookimpl
from trm.control import TrainControl
from trm.errors import TrmError
from trm.spec import RunSpec, structure_strict

Options = TypeVar("Options")


class RunPosition(Protocol):
    """What a schedule plugin reads of the run's state (``trm.state.TrainState`` has it).

    ``step`` is the number of finished optimizer steps, which is also the index of the step
    the loop takes next; ``total_steps`` the length of the whole schedule (``--max-steps``
    stops earlier without shortening it, as for the learning rate).
    """

    step: int
    total_steps: int
    spec: RunSpec


def read_table(spec: RunSpec, name: str, cls: type[Options]) -> Options:
    """``spec``'s ``[plugins.NAME]`` table structured into ``cls`` (its defaults when the
    table is absent); TrmError naming ``plugins.NAME.KEY`` for a bad key or value."""
    table: Any = spec.plugins.get(name, {})
    if not isinstance(table, dict):
        raise TrmError(f"spec: plugins.{name} must be a table ([plugins.{name}])")
    return structure_strict(table, cls, "spec", root=f"plugins.{name}")


def end_step(fraction: float, step: int, total_steps: int) -> int:
    """The step a schedule ends at: ``step`` when above 0, else ``fraction`` of
    ``total_steps`` (rounded to the nearest step), never below 1."""
    if step > 0:
        return step
    return max(1, round(fraction * total_steps))


def refuse(problems: list[str]) -> None:
    """Raise one TrmError listing ``problems`` (``KEY: what is wrong``), if there are any."""
    if problems:
        raise TrmError("spec: " + "; ".join(problems))


class StepSchedule(Generic[Options]):
    """Skeleton of an opt-in plugin whose request depends on the step alone.

    A subclass gives ``read_options(spec)`` (its table, structured and checked) and
    ``ask(state, control)`` (the request for the step of index ``state.step``); it may add
    ``starting(state, control)`` for warnings at the start. The spec is checked before any
    data are built (``check_spec``), the options are read again when training starts, and the
    request is made once before the first step and after every step, so a resumed run asks
    for exactly what an uninterrupted one would. One instance per run.
    """

    ACTIVATION = "opt-in"

    def __init__(self, options: Options) -> None:
        self.options = options

    def read_options(self, spec: RunSpec) -> Options:
        raise NotImplementedError

    def ask(self, state: RunPosition, control: TrainControl) -> None:
        raise NotImplementedError

    def starting(self, state: RunPosition, control: TrainControl) -> None:
        """Called once when training starts, after the options are read."""

    @hookimpl
    def check_spec(self, spec: RunSpec) -> None:
        self.read_options(spec)

    @hookimpl
    def on_train_start(self, state: RunPosition, control: TrainControl) -> None:
        self.options = self.read_options(state.spec)
        self.starting(state, control)
        self.ask(state, control)

    @hookimpl
    def on_step(self, state: RunPosition, control: TrainControl) -> None:
        self.ask(state, control)
