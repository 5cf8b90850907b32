"""Whether compiling a small network pays for this run: the seconds it saves over the planned
steps against the seconds it costs, from what this machine measured (the compile ledger,
:mod:`trm.device.compile_ledger`) or, where it measured nothing yet, from priors.

A large network (:func:`trm.measure.flops.matmul_bound`) is compiled wherever torch.compile
can run, as before: its steps last seconds and compiling pays within a few of them. For a
small one, ``runtime.compile = "auto"`` compiles when

    planned steps x (eager step s - compiled step s)  >  compile s,

each figure the ledger's for this shape on this machine where it has one:

- the compiled step: measured, or the eager step x (1 - :data:`PRIOR_SAVING`);
- the compile seconds: measured (a warm on-disk cache makes them small), or
  :data:`PRIOR_COMPILE_S`;
- the eager step: measured; without it the rule cannot weigh the steps and the run stays
  eager, measuring it for the next run.

A run with a wall-time budget (``train.time_budget_s``) weighs the budget instead: compiling
buys ``budget x saving`` seconds of training for its compile seconds.

The priors come from benchmarks/results/compile-payoff-region-epyc-zen3.json (2-core AMD Zen
3, fp32, batch 128, trm compiling the whole recursion): a cold compile took 60-70 s and a warm
one under 5 s; compiling saved 18% of a step of the quickstart's network and nothing
measurable of the 9x9 laptop network's. The saving prior is on the cautious side of that
document: a wrong "compile" costs a run its compile seconds, a wrong "eager" a share of its
steps, and either is corrected by the figures that run records.
"""

from __future__ import annotations

from attrs import frozen

from trm.device.compile_ledger import CompileRecord

PRIOR_SAVING = 0.1  # share of an eager step that compiling saves, where not measured
PRIOR_COMPILE_S = 70.0  # seconds compiling takes, where not measured (a cold compile)


@frozen
class PlannedWork:
    """What the run will do: ``steps`` optimizer steps (0: unknown), or ``budget_s`` seconds
    of training (0: none)."""

    steps: int = 0
    budget_s: float = 0.0


@frozen
class CompileVerdict:
    compile: bool
    reason: str


def small_network_verdict(work: PlannedWork, record: CompileRecord | None) -> CompileVerdict:
    """Compile a small network for ``work``, given this shape's ledger ``record`` (None: none
    measured here)? The reason is one line for the run's notices."""
    record = record or CompileRecord()
    compile_s = record.compile_s if record.compile_s is not None else PRIOR_COMPILE_S
    cost = f"{compile_s:.0f} s to compile" + (
        f" ({record.compile_cache} cache, measured)" if record.compile_s is not None else ""
    )
    eager = record.eager_step_s
    if eager is not None and record.compiled_step_s is not None:
        saving = max(0.0, 1.0 - record.compiled_step_s / eager) if eager > 0 else 0.0
        measured_saving = True
    else:
        saving, measured_saving = PRIOR_SAVING, False
    how = "measured" if measured_saving else "expected"
    if work.budget_s > 0:
        gained = work.budget_s * saving
        return _verdict(
            gained > compile_s,
            f"a {work.budget_s:.0f} s budget gains {gained:.0f} s of steps ({how} "
            f"{saving:.0%} a step) for {cost}",
        )
    if eager is None:
        return CompileVerdict(
            False,
            "running eager: the network is small and this shape's step time is not measured "
            "here yet (this run measures it; runtime.compile = 'on' compiles)",
        )
    if work.steps <= 0:
        return CompileVerdict(
            False, "running eager: the network is small and the run's steps are not known"
        )
    saved = work.steps * eager * saving
    return _verdict(
        saved > compile_s,
        f"{work.steps} steps x {eager:.3f} s x {saving:.0%} ({how}) saves {saved:.0f} s for {cost}",
    )


def _verdict(compile_it: bool, why: str) -> CompileVerdict:
    if compile_it:
        return CompileVerdict(True, f"compiling the small network: {why}")
    return CompileVerdict(False, f"running eager: compiling the small network would not pay: {why}")
