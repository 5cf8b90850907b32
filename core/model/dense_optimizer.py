"""The dense optimizer a run trains its parameters with, as a plugin offers it by name.

``train.optimizer`` names one :class:`DenseOptimizer`; plugins offer them through the
``dense_optimizers`` hook (the built-in ``adam_atan2`` and ``adamw``, defined in
:mod:`trm.model.optim`, come from the built-in plugin ``trm.plugins.optimizers.adam`` as any
third party's would). The entry says how to
build the optimizer from the trainable parameters and the TrainSpec, and how many bytes of
state it keeps per parameter element (the memory estimate's "optimizer states"). The
puzzle-embedding table's sign-SGD is not one of these: it is always built beside it.

A checkpoint holds the optimizer's ``state_dict()`` and a resume calls ``load_state_dict``,
so an optimizer whose whole state is in its state dict (every ``torch.optim.Optimizer`` that
keeps its tensors in ``self.state``) resumes bit-identically.

A plugin's answer is checked before anything is written (:func:`offered_by`, and
:func:`check_builds`, a trial build over one small parameter): an answer that is not a list
of entries, an entry whose fields are of the wrong kind, and a ``build`` that raises or makes
something the loop cannot drive are each one TrmError naming the plugin and what it answered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import torch
from attrs import frozen

from trm.errors import TrmError

if TYPE_CHECKING:
    from trm.spec import TrainSpec

# What an entry's ``build`` is: (trainable parameters, the TrainSpec) -> a torch optimizer
# whose single param group takes ``train.lr``, ``(train.beta1, train.beta2)`` and
# ``train.weight_decay``. An entry with ``takes_names`` gets ``(name, parameter)`` pairs
# instead and may return a list of optimizers, one per kind of parameter, whose param groups
# may set their own ``"base_lr"`` (the learning rate the schedule scales; else ``train.lr``).
OptimizerFactory = Callable[[Any, "TrainSpec"], "torch.optim.Optimizer | list[Any]"]
# (parameter name, shape) of every trainable parameter -> bytes of optimizer state
StateBytes = Callable[[Sequence[tuple[str, tuple[int, ...]]]], int]

# What the loop and the checkpoints call on a built optimizer.
OPTIMIZER_METHODS = ("zero_grad", "step", "state_dict", "load_state_dict")
# How much of a plugin's answer an error message quotes.
QUOTED_CHARS = 80


@frozen
class DenseOptimizer:
    """One optimizer ``train.optimizer`` may name.

    ``name`` is the value of ``train.optimizer``; ``build`` makes it (see
    :data:`OptimizerFactory`); ``state_bytes_per_element`` is the bytes of state it keeps for
    each element of a float32 parameter (Adam-type: two float32 moments, 8; Lion: one, 4);
    ``description`` is one line for messages and ``trm plugins``. ``unavailable_reason`` is
    None when it can be built here, else one sentence saying what to install (its package is
    missing): a spec naming it is refused with that sentence. ``plugin`` is the name of the
    plugin that offered it, filled in by the plugin manager (a plugin leaves it empty).

    An optimizer that treats parameters by kind (Muon for the hidden matrices, a companion
    for the rest) sets ``takes_names`` (``build`` then receives ``(name, parameter)`` pairs
    and may return several optimizers) and ``state_bytes`` (the exact state bytes for the
    model's ``(name, shape)`` list; ``state_bytes_per_element`` is then its largest rate).
    """

    name: str
    build: OptimizerFactory
    state_bytes_per_element: int
    description: str = ""
    unavailable_reason: str | None = None
    plugin: str = ""
    takes_names: bool = False
    state_bytes: StateBytes | None = None

    def state_bytes_for(self, shapes: Sequence[tuple[str, tuple[int, ...]]]) -> int:
        """Bytes of optimizer state for trainable parameters of these ``(name, shape)``s:
        ``state_bytes`` where the entry gives it, else ``state_bytes_per_element`` for every
        element."""
        if self.state_bytes is not None:
            return self.state_bytes(shapes)
        return self.state_bytes_per_element * sum(math.prod(shape) for _, shape in shapes)


def _shortened(text: str) -> str:
    """``text`` on one line, cut to :data:`QUOTED_CHARS`."""
    text = " ".join(text.split())
    return text if len(text) <= QUOTED_CHARS else text[: QUOTED_CHARS - 3] + "..."


def _quoted(value: object) -> str:
    """``value`` as an error message shows it: its repr, on one line and cut short."""
    try:
        return _shortened(repr(value))
    except Exception:  # a plugin's object whose repr fails still gets named
        return f"<{type(value).__name__}>"


def _entry_problem(entry: object) -> str | None:
    """What is wrong with one element of a ``dense_optimizers`` answer, or None."""
    if not isinstance(entry, DenseOptimizer):
        return f"{_quoted(entry)} is not a trm.model.DenseOptimizer"
    if not isinstance(entry.name, str) or not entry.name.strip():
        return f"the entry's name {_quoted(entry.name)} is not a non-empty text"
    if not callable(entry.build):
        return f"entry {entry.name!r}: its build {_quoted(entry.build)} is not callable"
    size = entry.state_bytes_per_element
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return (
            f"entry {entry.name!r}: its state_bytes_per_element {_quoted(size)} is not a "
            "whole number of bytes, 0 or more"
        )
    if entry.state_bytes is not None and not callable(entry.state_bytes):
        return f"entry {entry.name!r}: its state_bytes {_quoted(entry.state_bytes)} is not callable"
    if not isinstance(entry.description, str):
        return f"entry {entry.name!r}: its description {_quoted(entry.description)} is not a text"
    if entry.unavailable_reason is not None and not isinstance(entry.unavailable_reason, str):
        return (
            f"entry {entry.name!r}: its unavailable_reason {_quoted(entry.unavailable_reason)} "
            "is neither None nor a text"
        )
    return None


def _fix(plugin: str) -> str:
    return f"fix the plugin, or switch it off with --plugins no:{plugin}"


def offered_by(plugin: str, hook: Callable[[], object]) -> list[DenseOptimizer]:
    """The entries plugin ``plugin`` answers its ``dense_optimizers`` implementation ``hook``
    with (None: none), each marked with the plugin's name. TrmError naming the plugin when
    the hook raises (a TrmError of its own passes as it is), and naming its answer when that
    is not a list (or tuple) of well-formed :class:`DenseOptimizer` entries."""
    try:
        answer = hook()
    except TrmError:
        raise
    except Exception as exc:
        raise TrmError(
            f"plugin {plugin!r} failed in dense_optimizers: {type(exc).__name__}: "
            f"{_shortened(str(exc))}; {_fix(plugin)}"
        ) from exc
    if answer is None:
        return []
    if not isinstance(answer, (list, tuple)):
        raise TrmError(
            f"plugin {plugin!r} answered dense_optimizers with {_quoted(answer)}; "
            f"expected a list of trm.model.DenseOptimizer; {_fix(plugin)}"
        )
    entries = []
    for entry in answer:
        problem = _entry_problem(entry)
        if problem is not None:
            raise TrmError(
                f"plugin {plugin!r} answered dense_optimizers with a bad entry: {problem}; "
                f"{_fix(plugin)}"
            )
        entries.append(attrs.evolve(entry, plugin=plugin))
    return entries


def _optimizer_problem(optimizer: object) -> list[str]:
    """The methods and param groups (:data:`OPTIMIZER_METHODS`) ``optimizer`` lacks."""
    missing = [m for m in OPTIMIZER_METHODS if not callable(getattr(optimizer, m, None))]
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        missing.append("param_groups")
    return missing


def build_checked(entry: DenseOptimizer, params: Any, train: TrainSpec) -> list[Any]:
    """``entry.build(params, train)``, checked, as a list of optimizers (an entry that
    ``takes_names`` may build several): TrmError naming the plugin when the build raises (a
    TrmError of its own passes as it is) or answers something without the param groups and
    methods (:data:`OPTIMIZER_METHODS`) the loop and the checkpoints use."""
    who = f"optimizer {entry.name!r} (plugin {entry.plugin or 'built in'!r})"
    fix = _fix(entry.plugin) if entry.plugin else "report it as a bug"
    try:
        built = entry.build(params, train)
    except TrmError:
        raise
    except Exception as exc:
        raise TrmError(
            f"{who}: its build raised {type(exc).__name__}: {_shortened(str(exc))}; {fix}"
        ) from exc
    optimizers = built if entry.takes_names and isinstance(built, list) and built else [built]
    for optimizer in optimizers:
        missing = _optimizer_problem(optimizer)
        if missing:
            raise TrmError(
                f"{who}: its build answered {_quoted(optimizer)}, which has no "
                f"{', '.join(missing)}; build must make a torch.optim.Optimizer; {fix}"
            )
    return optimizers


def check_builds(entry: DenseOptimizer, train: TrainSpec) -> None:
    """Build ``entry`` once over one small parameter and drop it (see
    :func:`build_checked`), so that a build that cannot work is refused before the run
    writes anything."""
    probe = torch.nn.Parameter(torch.zeros(2))
    build_checked(entry, [("probe", probe)] if entry.takes_names else [probe], train)


def choose_dense_optimizer(offered: Iterable[DenseOptimizer], name: str) -> DenseOptimizer:
    """The entry called ``name`` among ``offered``; TrmError (one line, ``train.optimizer``)
    when none is, when two plugins offer that name, or when its package is missing."""
    entries = list(offered)
    matching = [entry for entry in entries if entry.name == name]
    if not matching:
        available = ", ".join(sorted({entry.name for entry in entries})) or "none"
        raise TrmError(
            f"train.optimizer: unknown optimizer {name!r}; available: {available} "
            "(an optimizer plugin adds more: trm plugins lists those installed)"
        )
    if len(matching) > 1:
        plugins = ", ".join(sorted({entry.plugin for entry in matching if entry.plugin}))
        by = f" ({plugins})" if plugins else ""
        raise TrmError(
            f"train.optimizer: {len(matching)} plugins{by} offer an optimizer called {name!r}; "
            "switch all but one off with --plugins no:NAME"
        )
    entry = matching[0]
    if entry.unavailable_reason is not None:
        raise TrmError(
            f"train.optimizer: {name!r} cannot be built here: {entry.unavailable_reason}"
        )
    return entry
