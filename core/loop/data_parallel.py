"""Data parallelism in the loop: what changes when several processes train one run.

Every rank reads its contiguous rows of the same global batch (the sampler's pure function
of (seed, step)), runs them through its rows of the carry, and back-propagates its loss sum
divided by the *global* batch size. :meth:`DataParallel.reduce_step` then sums the dense
gradients over the ranks with one all-reduce, so each rank holds the gradient one process
would have computed over the whole global batch; the puzzle-embedding optimizer gathers
every rank's looked-up ids and gradients before its update
(``SignSGDSparse.gather_lookups``). Every rank then applies the same update to the same
weights: weights, optimizer moments and EMA stay identical on all ranks without ever being
broadcast.

Decisions taken between steps — stop (SIGINT/SIGTERM, a plugin's stop), checkpoint, pause —
are agreed by one small all-reduce per step (:meth:`DataParallel.agree`), so every rank stops
after the same step and writes its part of the same checkpoint. A checkpoint is one file
written by rank 0: it holds every rank's carry rows (concatenated in rank order: the global
carry, laid out as one process would hold it) and every rank's RNG states, gathered to rank
0 first (:meth:`DataParallel.gather_parts`). Since the file is renamed into place atomically,
there is never a checkpoint with a part missing.

With one process every method is the identity and nothing is communicated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from attrs import define

from trm.device import distributed
from trm.device.distributed import World
from trm.device.rng import capture_rng, restore_rng
from trm.model import SignSGDSparse
from trm.state import TrainState

StepExamples = Callable[[int], np.ndarray]
# The flags of an after-step decision, reduced with MAX: stop, checkpoint, pause seconds.
_STOP, _CHECKPOINT, _PAUSE = range(3)


@define
class Decision:
    """What one rank wants after a step: stop (its reason), checkpoint (its reason), pause."""

    stop: str | None = None
    checkpoint: str | None = None
    pause_s: float = 0.0
    pause_reason: str = ""


class DataParallel:
    """This rank's share of the run; see the module docstring. ``rows`` are its rows of the
    global batch (all of them with one process)."""

    def __init__(self, world: World, global_batch: int) -> None:
        self.world = world
        self.global_batch = global_batch
        self.rows = world.rows(global_batch)

    @property
    def active(self) -> bool:
        return self.world.distributed

    @property
    def local_batch(self) -> int:
        return self.rows.stop - self.rows.start

    def examples(self, examples_for_step: StepExamples) -> StepExamples:
        """This rank's examples of each step (``examples_for_step`` itself with one process)."""
        if not self.active:
            return examples_for_step
        rows = self.rows
        return lambda step: examples_for_step(step)[rows]

    def attach(self, optimizers: list[Any]) -> None:
        """Make the puzzle-embedding optimizer gather every rank's lookups before updating."""
        if not self.active:
            return
        for opt in optimizers:
            if isinstance(opt, SignSGDSparse):
                opt.gather_lookups = _gather_lookups

    # ---------------------------------------------------------------- each step

    def reduce_step(self, model: torch.nn.Module, sums: torch.Tensor) -> None:
        """Sum the dense gradients and the step's loss and metric sums (the step's device
        vector) over the ranks, in place, in one flattened all-reduce per dtype, so every
        rank sees the global loss (a non-finite loss stops every rank at once) and the
        global metrics row. No host read."""
        if not self.active:
            return
        grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
        distributed.all_reduce_sum_([*grads, sums])

    def agree(self, mine: Decision) -> Decision:
        """The decision of all ranks: stop if any rank stops, checkpoint if any asks, pause
        for the longest pause asked; each reason is the first rank's (in rank order) that
        gave one. One all-reduce of three numbers per step; the reasons are gathered only
        when a flag is up."""
        if not self.active:
            return mine
        flags = distributed.all_reduce_max(
            [float(mine.stop is not None), float(mine.checkpoint is not None), mine.pause_s]
        )
        if not any(flags):
            return Decision()
        everyone = distributed.gather_objects(mine)
        stop = next((d.stop for d in everyone if d.stop is not None), None)
        checkpoint = next((d.checkpoint for d in everyone if d.checkpoint is not None), None)
        longest = max(everyone, key=lambda d: d.pause_s)
        return Decision(stop, checkpoint, flags[_PAUSE], longest.pause_reason)

    # ---------------------------------------------------------------- checkpoints

    def gather_parts(self, state: TrainState) -> list[dict[str, Any]] | None:
        """Every rank's part of a checkpoint — its carry rows, RNG states and micro-batch —
        in rank order on rank 0 (None elsewhere); a collective. With one process None: the
        state saves its own."""
        if not self.active:
            return None
        part = {
            "carry": state.carry.state_dict() if state.carry is not None else None,
            "rng": capture_rng(state.backend, state.device),
            "micro_batch_size": state.micro_batch_size,
        }
        return distributed.gather_to_first(part)

    def share_outcome(self, outcome: Any) -> Any:
        """Rank 0's outcome of writing a checkpoint, on every rank."""
        return distributed.broadcast_from_first(outcome) if self.active else outcome

    def adopt(self, state: TrainState, payload: dict[str, Any], log: Callable[[str], None]) -> str:
        """Take this rank's share of a loaded checkpoint; returns a note when the checkpoint
        was written by another number of processes ("" otherwise).

        The checkpoint's carry is the global one (rows in global order, whatever the world
        size that wrote it), so this rank keeps its rows. Written by as many processes as
        now, each rank restores its own RNG states and micro-batch (bit-identical resume).
        Written by another number, the carry is still exact (it does not depend on the world
        size), every rank takes rank 0's RNG states (the ranks draw the same numbers) and the
        micro-batch returns to the spec's; the note says so.
        """
        saved_world = int(payload.get("world_size") or 1)
        parts = payload.get("ranks") or []
        if state.carry is not None:
            if state.carry.batch_size != self.global_batch:
                log(
                    f"warning: the checkpoint's carry has {state.carry.batch_size} rows, the "
                    f"global batch {self.global_batch}: the carry starts afresh"
                )
                state.carry = None
            elif self.active:  # the loaded carry is still on the host: only these rows move
                index = torch.arange(self.rows.start, self.rows.stop, device=state.carry.z_H.device)
                state.carry = state.carry.index_rows(index)
        if saved_world == self.world.size:
            if self.active and len(parts) == self.world.size:
                mine = parts[self.world.rank]
                restore_rng(mine["rng"], state.backend, state.device)
                state.micro_batch_size = int(mine["micro_batch_size"])
            return ""
        configured = state.spec.runtime.micro_batch_size or self.global_batch
        state.micro_batch_size = min(configured, self.local_batch)
        return (
            f"the checkpoint was written by {saved_world} process(es), this run has "
            f"{self.world.size}: each rank continues with its rows of the saved global carry "
            "and rank 0's RNG states, and the micro-batch starts again at "
            f"{state.micro_batch_size}; the results equal those of an uninterrupted run only "
            "up to floating-point rounding"
        )

    def weights_agree(self, model: torch.nn.Module, digest: str) -> bool:
        """Whether every rank's weights hash to ``digest`` (this rank's); a collective."""
        if not self.active:
            return True
        return all(d == digest for d in distributed.gather_objects(digest))


def _gather_lookups(ids: torch.Tensor, grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's puzzle-embedding lookups and their gradients, in rank order. Every rank
    looks up one id per row of its equal share of the global batch, so the row counts are
    known: no count is exchanged (and no host read made)."""
    rows = ids.shape[0]
    return (
        distributed.all_gather_rows(ids, rows_each=rows),
        distributed.all_gather_rows(grads, rows_each=rows),
    )
