"""A model trained on a multi-task mix, as ``trm solve``/``trm eval``/``trm.load`` use it:
its layout (recorded in its checkpoint) and which of its tasks a puzzle is for.

A puzzle is solved in its own task's encoding: parsed by the task's data source at the
task's row length, mapped into the mix's tokens (padded, offset; its puzzle identifier
offset), answered, and mapped back (:class:`trm.data.mix_layout.MixLayout`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from trm.data.mix_layout import MixLayout
from trm.errors import TrmError


def checkpoint_layout(payload: Mapping[str, Any]) -> MixLayout | None:
    """The mix layout a checkpoint records (None: it was trained on one dataset)."""
    recorded = payload.get("mix_layout")
    return MixLayout.from_dict(recorded) if isinstance(recorded, dict) else None


def pick_task(
    layout: MixLayout,
    sources: Mapping[str, Any],
    puzzle: str | os.PathLike[str],
    task: str | None,
    parse: Callable[[Any, str | os.PathLike[str], int], Any],
) -> str:
    """The task ``puzzle`` is for: ``task`` when given (TrmError for one the model did not
    learn), else the only task whose source parses it; TrmError asking for ``--task`` when
    none or several do."""
    if task is not None:
        return layout.task(task).name
    fits = []
    for t in layout.tasks:
        try:
            parse(sources[t.name], puzzle, t.seq_len)
        except TrmError:
            continue
        fits.append(t.name)
    if len(fits) == 1:
        return fits[0]
    which = "several of its tasks" if fits else "none of its tasks"
    raise TrmError(
        f"the model learned {', '.join(layout.names)}, and the puzzle reads as {which}; name "
        "the task with --task NAME (Model.solve(puzzle, task=NAME))"
    )
