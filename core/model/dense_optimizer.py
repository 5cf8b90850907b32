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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

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


@frozen
class DenseOptimizer:
    """One optimizer ``train.optimizer`` may name.

    ``name`` is the value of ``train.optimizer``; ``build`` makes it (see
    :data:`OptimizerFactory`); ``state_bytes_per_element`` is the bytes of state it keeps for
    each element of a float32 parameter (Adam-type: two float32 moments, 8; Lion: one, 4);
    ``description`` is one line for messages and ``trm plugins``. ``unavailable_reason`` is
    None when it can be built here, else one sentence saying what to install (its package is
    missing): a spec naming it is refused with that sentence.

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
    takes_names: bool = False
    state_bytes: StateBytes | None = None

    def state_bytes_for(self, shapes: Sequence[tuple[str, tuple[int, ...]]]) -> int:
        """Bytes of optimizer state for trainable parameters of these ``(name, shape)``s:
        ``state_bytes`` where the entry gives it, else ``state_bytes_per_element`` for every
        element."""
        if self.state_bytes is not None:
            return self.state_bytes(shapes)
        return self.state_bytes_per_element * sum(math.prod(shape) for _, shape in shapes)


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
        raise TrmError(
            f"train.optimizer: {len(matching)} plugins offer an optimizer called {name!r}; "
            "switch all but one off with --plugins no:NAME"
        )
    entry = matching[0]
    if entry.unavailable_reason is not None:
        raise TrmError(
            f"train.optimizer: {name!r} cannot be built here: {entry.unavailable_reason}"
        )
    return entry
