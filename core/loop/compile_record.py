"""What a run measured for the small-network compile decision, written to the compile ledger
(:mod:`trm.device.compile_ledger`) when the run ends; and a resumed run keeping the decision
its checkpoint ran under.

A run whose compilation the planner decided (``RuntimeChoice.compile_key`` is set) records
its warm step time (the median of its steps, less the first :data:`WARM_AFTER_STEPS` at each
recursion depth) as the eager or the compiled step of its key; a compiled run also records
what compiling cost, and whether torch's on-disk caches were warm. Compiling happens at the
first steps of each depth the run trains at (a curriculum compiles each new depth once) and in
the steps the time budget timed before the loop (:mod:`trm.measure.stage_speed`, which adds
them with :meth:`StepClock.add_compile_seconds`); the cost is the seconds of those first steps
above the median of their own depth's warm steps. A run that took fewer than
:data:`MIN_TIMED_STEPS` warm steps records nothing (too few to trust).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from trm.device.compile import compile_network, is_compiled, uncompile_network
from trm.device.compile_ledger import cache_answer, compile_cache_counts, record_measurement
from trm.state import TrainState

WARM_AFTER_STEPS = 3  # the first steps compile, fill caches and grow the heap
MIN_TIMED_STEPS = 5


Depth = tuple[int, int]


def compile_excess_s(first_s: Sequence[float], warm_median_s: float) -> float:
    """Compile seconds in the first steps of a depth: their seconds above as many warm
    steps of that depth (never below 0)."""
    return max(0.0, sum(first_s) - len(first_s) * warm_median_s)


class StepClock:
    """Seconds of each step this process took, by recursion depth, the compile seconds of
    steps timed before the loop, and torch's compile-cache counts when the clock started,
    for :meth:`record`."""

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.by_depth: dict[Depth | None, list[float]] = {}
        self.compile_s_before_loop = 0.0
        self.cache_before = compile_cache_counts()

    def add(self, seconds: float, depth: Depth | None = None) -> None:
        """One step of ``seconds`` at ``depth`` (``(H_cycles, L_cycles)`` in force)."""
        if self.key is not None:
            self.by_depth.setdefault(depth, []).append(seconds)

    def add_compile_seconds(self, seconds: float) -> None:
        """Compile seconds spent before the loop (the time budget's timing steps)."""
        if self.key is not None:
            self.compile_s_before_loop += max(0.0, seconds)

    def compile_s(self) -> float:
        """What compiling cost this run: at each depth with enough warm steps to know its
        step time, its first :data:`WARM_AFTER_STEPS` steps' seconds above that median; plus
        the seconds added before the loop."""
        total = self.compile_s_before_loop
        for steps in self.by_depth.values():
            warm = steps[WARM_AFTER_STEPS:]
            if len(warm) >= MIN_TIMED_STEPS:
                total += compile_excess_s(steps[:WARM_AFTER_STEPS], statistics.median(warm))
        return total

    def record(self, compiled: bool) -> bool:
        """Write the run's figures to the ledger as eager or ``compiled`` steps (how the
        network ran at the end: a resume may have followed its checkpoint, a failed compile
        fallen back to eager); False when there was nothing to write or the ledger could not
        be written."""
        warm = [s for steps in self.by_depth.values() for s in steps[WARM_AFTER_STEPS:]]
        if self.key is None or len(warm) < MIN_TIMED_STEPS:
            return False
        step_s = statistics.median(warm)
        if not compiled:
            return record_measurement(self.key, eager_step_s=step_s)
        return record_measurement(
            self.key,
            compiled_step_s=step_s,
            compile_s=self.compile_s(),
            compile_cache=cache_answer(self.cache_before, compile_cache_counts()),
        )


def follow_checkpoint_compile(
    state: TrainState, log: Callable[[str], None], graphs: bool = False
) -> None:
    """A resumed run whose compilation the planner decided runs as its checkpoint ran
    (compiled or eager), whatever the ledger says now: the ledger learns from every run, so
    the verdict may change between the two starts, and the same arithmetic at every step
    keeps a resumed run's weights those of an uninterrupted one."""
    wanted = state.checkpoint_compiled
    if wanted is None or wanted == is_compiled(state.model):
        return
    if wanted:
        compile_network(state.model, state.backend, graphs=graphs)
    else:
        uncompile_network(state.model)
    how = "compiled" if wanted else "eager"
    log(f"running the network {how}, as the run did before its checkpoint at step {state.step}")
