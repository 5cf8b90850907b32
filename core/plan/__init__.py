"""Everything before the loop: fit a spec to this machine (:func:`plan_run`), the data a
spec reads (:mod:`~trm.plan.dataset`), the tiers ``trm analyze`` compares
(:mod:`~trm.plan.tiers`) and the run directory (:mod:`~trm.plan.run_dir`)."""

from trm.plan.pipeline import Plan, plan_run

__all__ = ["Plan", "plan_run"]
