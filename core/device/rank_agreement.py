"""How the ranks of one torchrun job agree before they train, beside the process group
(:mod:`trm.device.distributed`).

Rank 0 decides what the run is (its input, its plan, its ``max_steps``); every other rank
checks its own view and then adopts rank 0's, saying so when they differ. With one process
every function here is the identity: the value given is the value agreed on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import TypeVar

from trm.device import distributed
from trm.device.distributed import World
from trm.errors import RankZeroStopped, TrmError

T = TypeVar("T")


def first_rank_decides(check: Callable[[], T], world: World) -> T:
    """``check()`` on every rank; its value when every rank's check passed.

    When any rank's check refuses its input (a TrmError), every rank stops and the error is
    said once: rank 0 raises its own refusal, else the first refusing rank's, named ("rank 1:
    spec file … does not exist"); the other ranks raise :class:`RankZeroStopped` (they exit
    quietly)."""
    try:
        value, refused = check(), None
    except TrmError as exc:
        value, refused = None, exc
    said = distributed.gather_objects(None if refused is None else str(refused), patient=True)
    first = next(((rank, text) for rank, text in enumerate(said) if text is not None), None)
    if first is None:
        return value  # type: ignore[return-value]
    rank, text = first
    if not world.is_first:
        raise RankZeroStopped(text)
    raise refused if refused is not None else TrmError(f"rank {rank}: {text}")


def first_rank_first(work: Callable[[], T], world: World) -> T | None:
    """``work()`` on rank 0 while the other ranks wait (rank 0 builds what they will read);
    its value on rank 0, None on the others.

    When ``work`` refuses (a TrmError), rank 0 raises it and the other ranks raise
    :class:`RankZeroStopped` with its message; with one process this is ``work()``."""
    value: T | None = None
    refused: TrmError | None = None
    if world.is_first:
        try:
            value = work()
        except TrmError as exc:
            refused = exc
    first = distributed.broadcast_from_first(
        None if refused is None else str(refused), patient=True
    )
    if refused is not None:
        raise refused
    if first is not None:
        raise RankZeroStopped(first)
    return value


def adopt_first(mine: T, world: World, warn: Callable[[T, T], None]) -> T:
    """Rank 0's value of something every rank must share; ``mine`` is this rank's own.

    Rank 0 sends ``mine`` and returns it; another rank receives rank 0's and, when it
    differs from its own, calls ``warn(mine, first)`` before returning rank 0's. Every rank
    must call this at the same point (it is a collective)."""
    first = distributed.broadcast_from_first(mine if world.is_first else None)
    if not world.is_first and first != mine:
        warn(mine, first)
    return first


@contextmanager
def quiet_unless_first(world: World) -> Iterator[None]:
    """Rank 0 alone writes to stdout (the progress display): on the other ranks stdout goes
    to nowhere inside this block."""
    if world.is_first:
        yield
        return
    with open(os.devnull, "w", encoding="utf-8") as sink, redirect_stdout(sink):
        yield
