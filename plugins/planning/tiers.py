"""Fit a run to the machine: conservative, balanced or extreme use of the memory budget.

``adapt_config`` targets 50% / 75% / 95% of the usable memory budget (the device's memory
where the run has its own, else the host's after the OS reserve). It keeps the spec's global
batch and picks, in this order:

1. precision: bf16 autocast where the device multiplies bf16 natively (``runtime.precision``
   ``auto`` only; an explicit choice is kept);
2. in extreme mode on the host, ``runtime.host_memory = "system"`` (``auto`` only): reused
   host memory (trm.device.host_memory) is faster but its peak varies more from run to run.
   Threads are left to the backend (``runtime.threads`` 0 stays 0): the cpu backend counts
   the cores other processes leave free, and follows them during the run;
3. the largest micro-batch whose estimated peak stays ``ESTIMATE_MARGIN`` (5 points of the
   budget) under the target, with gradient accumulation making up the rest. Only sizes that
   divide this process's rows of the global batch (all of it with one process) are tried, so
   every micro-batch of a step has the same shape (an uneven last one would cost a second
   compiled graph) and the global batch is always kept; and only multiples of the devices
   the backend splits a batch over (``estimate.replicas``: XLA's SPMD devices), so each
   device holds an equal share; an explicit
   ``runtime.micro_batch_size`` that already fits is kept (so a spec written for one tier
   runs unchanged under another);
   With ``runtime.activation_checkpointing = "auto"``, the tier turns recomputation on
   (and says so) when the largest micro-batch that fits with it beats the one without in
   predicted samples/s (:func:`recomputation_choice`), or when only with it does a
   micro-batch of 1 fit (instead of shrinking the model);
4. only when a micro-batch of 1 does not fit, even with recomputation: a smaller model
   (hidden size halved, then fewer L cycles, then fewer H cycles) — recorded with a reason
   that starts "MODEL SHRUNK".
   When even the smallest such model does not fit (memory the network's width does not set,
   such as a large puzzle-embedding table, fills the budget), the model is kept as written and
   the reason names the largest items. The puzzle-embedding table (one row per puzzle
   identifier, ``arch.puzzle_emb_ndim`` wide) is never shrunk: no tier changes
   ``puzzle_emb_ndim`` or the data.

Data loading runs in the training process from memory-mapped arrays, so there is no worker
count to choose. Every change is returned as a :class:`trm.spec.Change`.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from trm import hookimpl
from trm.control import accumulation_steps
from trm.device.distributed import env_world
from trm.hardware import HardwareProfile, format_bytes
from trm.measure.flops import model_flops
from trm.memory import MODE_TARGETS, MemoryEstimate
from trm.spec import Change, RunSpec

ACTIVATION = "default"

TARGETS = MODE_TARGETS
# Tiers plan this many points of the budget under their target: estimates of real runs land
# within a few percent of the measured peak (benchmarks/memory_accuracy.py), so a run
# planned at the target itself could end up just over it.
ESTIMATE_MARGIN = 0.05
SHRUNK = "MODEL SHRUNK"
MIN_HIDDEN = 32
# Per-sample speed against the micro-batch, for choosing recomputation: a step of micro-batch
# m runs at about m / (m + HALF_SPEED_MICRO_BATCH) of the device's best per-sample speed (its
# matrix products have m x positions rows, and every micro-batch pays the same dispatch and
# launch costs). A CPU is near its best from a few rows on (0.5: a micro-batch of 1 at two
# thirds, 8 at 94%); a GPU needs many rows to fill its cores (16: micro-batch 2 at 11%, 64
# at 80%). Round figures, not fitted: benchmarks/activation_checkpointing.py measures the
# CPU's side (docs/performance.md); no GPU figure was measured yet.
HALF_SPEED_MICRO_BATCH = {"host": 0.5, "device": 16.0}


def native_bf16(hardware: HardwareProfile, estimate: MemoryEstimate) -> bool:
    """Whether the device the run uses multiplies bf16 natively. On a device with memory of
    its own that is this process's device: the accelerator whose index is ``LOCAL_RANK``
    under torchrun (the one a backend gives each rank), else the first; one whose bf16
    support is unknown counts as not native."""
    if estimate.device_budget_bytes is not None and not estimate.unified_memory:
        local_rank = env_world().local_rank
        accelerators = hardware.accelerators or ()
        mine = next((a for a in accelerators if a.index == local_rank), None)
        return bool(mine is not None and mine.bf16)
    if estimate.unified_memory:
        return False  # unified memory (Apple GPUs): bf16 autocast is not faster than fp32
    return bool(hardware.cpu_native_bf16)


def _set(spec: RunSpec, key: str, value: Any) -> RunSpec:
    section, name = key.split(".")
    part = attrs.evolve(getattr(spec, section), **{name: value})
    return attrs.evolve(spec, **{section: part})


def _get(spec: RunSpec, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(spec, section), name)


def process_rows(spec: RunSpec) -> int:
    """This process's rows of the global batch: all of them, or its share under torchrun
    (the ranks split the global batch evenly; see ``World.rows``)."""
    world = env_world().size
    return max(1, spec.train.global_batch_size // max(1, world))


def micro_batch_sizes(rows: int, replicas: int = 1) -> list[int]:
    """The micro-batch sizes a tier may pick for ``rows`` rows split over ``replicas``
    devices: the divisors of ``rows`` that divide by ``replicas``, ascending (``[rows]``
    when none does: the backend refuses such a batch itself)."""
    small = [d for d in range(1, math.isqrt(rows) + 1) if rows % d == 0]
    divisors = sorted({*small, *(rows // d for d in small)})
    return [d for d in divisors if d % max(1, replicas) == 0] or [rows]


def largest_fitting_micro_batch(
    spec: RunSpec, estimate: MemoryEstimate, target: float
) -> tuple[int | None, MemoryEstimate | None]:
    """The largest micro-batch that divides this process's rows (:func:`process_rows`) and
    by the estimate's ``replicas`` whose estimate stays within ``target``, with that
    estimate; (None, None) when the smallest such micro-batch does not fit.

    A binary search over the divisors: estimates grow with the micro-batch (a property
    trm.testing checks).
    """

    def trial(micro: int) -> MemoryEstimate:
        return estimate.for_spec(_set(spec, "runtime.micro_batch_size", micro))

    sizes = micro_batch_sizes(process_rows(spec), estimate.replicas)
    low, high = 0, len(sizes) - 1
    best = trial(sizes[low])
    if not best.fits(target):
        return None, None
    while low < high:  # invariant: sizes[low] fits; every size above sizes[high] does not
        middle = (low + high + 1) // 2
        candidate = trial(sizes[middle])
        if candidate.fits(target):
            low, best = middle, candidate
        else:
            high = middle - 1
    return sizes[low], best


def recompute_cost(spec: RunSpec) -> float:
    """Extra compute of activation checkpointing, as a share of a training sample's: one more
    forward of the L_cycles + 1 grad-carrying network calls, against the step's forward
    (H_cycles x (L_cycles + 1) calls, twice with the bootstrapped Q target) and backward
    (2 x the grad-carrying calls). Heads and embeddings are left out, so the share is a
    little above the true one."""
    flops = model_flops(spec.arch, seq_len=1, vocab_size=1)
    step = flops.forward_net_calls + 2 * flops.grad_net_calls
    return flops.grad_net_calls / step


def relative_samples_per_s(micro: int, where: str, extra_compute: float = 0.0) -> float:
    """Predicted samples/s at micro-batch ``micro`` on ``where`` ("host"/"device"), as a share
    of the device's best, with ``extra_compute`` more compute per sample (see
    ``HALF_SPEED_MICRO_BATCH``)."""
    return micro / (micro + HALF_SPEED_MICRO_BATCH[where]) / (1.0 + extra_compute)


def recomputation_choice(
    spec: RunSpec, estimate: MemoryEstimate, planned: float, micro: int | None, where: str
) -> tuple[int, MemoryEstimate, str] | None:
    """Whether the tier should turn activation checkpointing on: (its micro-batch, that
    estimate, the reason) or None.

    ``micro`` is the largest micro-batch that fits ``planned`` without it (None: not even 1).
    On when only with it does a micro-batch of 1 fit (better than a smaller model), or when
    the largest micro-batch that fits with it is larger and its predicted samples/s, the
    recomputation's cost (:func:`recompute_cost`) paid, is higher
    (:func:`relative_samples_per_s`). Never when the whole global batch already fits.
    """
    global_batch = spec.train.global_batch_size
    if micro is not None and micro >= global_batch:
        return None
    on_spec = _set(spec, "runtime.activation_checkpointing", "on")
    on_micro, on_fitted = largest_fitting_micro_batch(on_spec, estimate, planned)
    if on_micro is None or on_fitted is None or (micro is not None and on_micro <= micro):
        return None
    cost = recompute_cost(spec)
    if micro is None:
        return (
            on_micro,
            on_fitted,
            f"a micro-batch of 1 fits only with recomputation: micro-batch {on_micro} with it, "
            f"at about {cost:.0%} more compute a sample, rather than a smaller model",
        )
    without = relative_samples_per_s(micro, where)
    with_it = relative_samples_per_s(on_micro, where, cost)
    if with_it <= without:
        return None
    return (
        on_micro,
        on_fitted,
        f"micro-batch {on_micro} with recomputation instead of {micro} without: predicted "
        f"{with_it / without - 1:+.0%} samples/s, the recomputation's {cost:.0%} more compute "
        f"a sample paid",
    )


def _smaller_models(spec: RunSpec) -> list[tuple[str, int]]:
    """Shrink steps in order: halve hidden (keeping heads' even width), then cycles."""
    arch = spec.arch
    steps: list[tuple[str, int]] = []
    hidden = arch.hidden_size // 2
    if (
        hidden >= MIN_HIDDEN
        and hidden % arch.num_heads == 0
        and (arch.mlp_t or (hidden // arch.num_heads) % 2 == 0)
    ):
        steps.append(("arch.hidden_size", hidden))
    if arch.L_cycles > 1:
        steps.append(("arch.L_cycles", max(1, arch.L_cycles // 2)))
    if arch.H_cycles > 1:
        steps.append(("arch.H_cycles", arch.H_cycles - 1))
    return steps


def smallest_micro_batch(spec: RunSpec, estimate: MemoryEstimate) -> int:
    """The smallest micro-batch a tier may pick (1, or the devices a batch is split over)."""
    return micro_batch_sizes(process_rows(spec), estimate.replicas)[0]


def _smallest_model(spec: RunSpec, micro: int) -> RunSpec:
    """``spec`` after every shrink step :func:`_smaller_models` offers, at micro-batch
    ``micro``."""
    while options := _smaller_models(spec):
        key, value = options[0]
        spec = _set(spec, key, value)
    return _set(spec, "runtime.micro_batch_size", micro)


def _largest_items(estimate: MemoryEstimate, where: str, count: int = 3) -> str:
    """The ``count`` largest items held against ``where``'s budget, as ``name size`` text."""
    locations = ("host", "device") if where == "host" and estimate.unified_memory else (where,)
    items = sorted((i for i in estimate.items if i.location in locations), key=lambda i: -i.bytes)
    return ", ".join(f"{i.name} {format_bytes(i.bytes)}" for i in items[:count])


def adapt(
    spec: RunSpec, hardware: HardwareProfile, estimate: MemoryEstimate, mode: str
) -> tuple[RunSpec, list[Change]]:
    """The tier's spec and the recorded changes (see the module docstring)."""
    target = TARGETS[mode]
    where = estimate.limiting_location()
    changes: list[Change] = []

    def change(key: str, value: Any, reason: str) -> None:
        nonlocal spec
        old = _get(spec, key)
        if old != value:
            changes.append(Change(key, old, value, reason))
            spec = _set(spec, key, value)

    # bf16 wherever the device multiplies it natively, small networks on a CPU included
    # (trm.plugins.backends.cpu.choose_cpu_precision says why).
    if spec.runtime.precision == "auto" and native_bf16(hardware, estimate):
        change("runtime.precision", "bf16", "the device multiplies bf16 natively")
    if mode == "extreme" and where == "host" and spec.runtime.host_memory == "auto":
        change(
            "runtime.host_memory",
            "system",
            "freed memory kept for reuse is faster but its peak varies more from run to run; "
            "extreme leaves no room for that",
        )

    budget = estimate.host_budget_bytes if where == "host" else estimate.device_budget_bytes
    if budget is None:
        return spec, changes
    goal = f"{mode}: {target:.0%} of the {where} budget {format_bytes(budget)}"
    planned = target - ESTIMATE_MARGIN
    current = spec.runtime.micro_batch_size
    if current:
        kept = estimate.for_spec(spec)
        if kept.fits(target):
            return spec, changes  # an explicit micro-batch that fits is the user's choice
    micro, fitted = largest_fitting_micro_batch(spec, estimate, planned)
    if spec.runtime.activation_checkpointing == "auto":
        chosen = recomputation_choice(spec, estimate, planned, micro, where)
        if chosen is not None:
            micro, fitted, why = chosen
            change("runtime.activation_checkpointing", "on", f"{goal}: {why}")
    least = smallest_micro_batch(spec, estimate)
    if micro is None:
        smallest = estimate.for_spec(_smallest_model(spec, least))
        if not smallest.fits(planned):
            changes.append(
                Change(
                    "runtime.micro_batch_size",
                    spec.runtime.micro_batch_size,
                    least,
                    f"even the smallest model does not fit {goal} (largest items: "
                    f"{_largest_items(smallest, where)}); the model is kept as written since "
                    "shrinking it cannot help; expect out of memory",
                )
            )
            return _set(spec, "runtime.micro_batch_size", least), changes
    while micro is None:
        options = _smaller_models(spec)
        if not options:
            changes.append(
                Change(
                    "runtime.micro_batch_size",
                    spec.runtime.micro_batch_size,
                    least,
                    f"{SHRUNK}: even the smallest model does not fit {goal}; expect out of memory",
                )
            )
            return _set(spec, "runtime.micro_batch_size", least), changes
        key, value = options[0]
        change(key, value, f"{SHRUNK}: a micro-batch of {least} does not fit {goal}")
        micro, fitted = largest_fitting_micro_batch(spec, estimate, planned)
    assert fitted is not None
    share = fitted.budget_fraction() or 0.0
    rows = process_rows(spec)
    accumulation = accumulation_steps(micro, rows)
    whose = "" if rows == spec.train.global_batch_size else f"this process's {rows} rows of "
    change(
        "runtime.micro_batch_size",
        micro,
        f"largest micro-batch dividing {whose}the global batch under {goal} (planned "
        f"{planned:.0%}, a margin for estimate error): predicted peak {share:.0%} of it, "
        f"{accumulation} equal accumulation step(s) keep the global batch "
        f"{spec.train.global_batch_size}",
    )
    return spec, changes


@hookimpl
def adapt_config(
    spec: RunSpec, hardware: HardwareProfile, estimate: MemoryEstimate, mode: str
) -> tuple[RunSpec, list[Change]] | None:
    """Fit ``spec`` to ``mode``'s share of the memory budget (see the module docstring)."""
    if mode not in TARGETS or getattr(estimate, "remake", None) is None:
        return None
    new_spec, changes = adapt(spec, hardware, estimate, mode)
    return (new_spec, changes) if changes else None
