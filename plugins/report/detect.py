"""Two things that go wrong slowly, found in a run's training rows: a host-memory leak and a
slowdown. Pure functions of the metrics.jsonl rows, so ``trm report`` and the end of
``trm run`` (the ``report`` plugin's ``run_findings``) judge a run the same way.

**Leak.** After a few warm-up steps (allocator arenas, caches and the first evaluation's buffers
settle there) a training step allocates the same tensors every time, so resident host memory
should stay flat. The detector fits "flat, then growing linearly from step B" to
``mem_host_mb`` by least squares, trying every B, and calls it a leak when

- the fitted growth is at least ``LEAK_MB_PER_1K_STEPS`` (100 MB per 1,000 steps),
- the memory grew at least ``LEAK_MIN_GROWTH_MB`` (32 MB) from B to the end, and
- it grew steadily: split the rows after B into four equal parts, and each part's median
  exceeds the previous part's by at least a quarter of what the fit predicts.

Why these numbers: the paper's recipes take 50,000 to 100,000+ optimizer steps; 100 MB per
1,000 steps is 5-10 GB over such a run, enough to exhaust a laptop or a shared node, while the
growth a clean run shows — allocator fragmentation, caches filling — comes in steps that stop
(the third rule), and the 32 MB floor is above the few megabytes by which glibc and PyTorch
grow the heap at a time, so a short run's noise is not a trend. Measured on a clean run: the
quickstart's resident memory rose by about 50 MB in its first 20 steps, 8 MB in the next 130.

**Slowdown.** The speed judged is work per second: ``samples_per_s`` times the work of a
sample at the recursion depth the row records (``H_cycles``, ``L_cycles``), relative to the
depth of the first row judged — so a curriculum that deepens the recursion (a step at (2, 3)
does 2.7 times the work of one at (1, 1)) is not a slowdown, while a run at one depth is
judged on its samples/s exactly as before. A sample's work is
:func:`trm.recursion.net_calls_per_sample`: the H_cycles × (L_cycles + 1) forward calls
of the network plus 2 × the L_cycles + 1 calls that back-propagate — the analytic FLOPs of
:mod:`trm.measure.flops` in units of one network call, without the heads and embeddings (they
do not change with the depth and are under 1% of the FLOPs of sudoku9-laptop's network).
Not samples × H × (L + 1): only the last H cycle back-propagates, so that count calls (2, 3)
4 times (1, 1)'s work where the FLOPs say 2.7 (and 0.48 s against 0.19 s were measured), and
would hide a real slowdown of up to a third at the deep stage. Rows without the depth count
as the first depth.

The early median is the median work per second of the first quarter of the rows after
warm-up (the first step pays for compilation and cold caches). A rolling median
over a window of ``max(5, rows / 10)`` steps smooths single slow steps (a checkpoint, another
program's burst); a slow stretch is a run of windows whose median is more than
``SLOWDOWN_FRACTION`` (20%) below the early median, beginning at the first slow step of its
first window. The longest stretch is reported. The suggestion looks for a cause in the run's
own records: a thermal event, a smaller micro-batch, a larger share of each step spent
waiting for data.

Too few rows (``MIN_ROWS``) to judge: nothing is reported.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

import numpy as np

from trm.findings import Finding
from trm.recursion import net_calls_per_sample

LEAK_MB_PER_1K_STEPS = 100.0
LEAK_MIN_GROWTH_MB = 32.0
LEAK_QUARTER_SHARE = 0.25  # each quarter must add at least this share of the fitted growth
SLOWDOWN_FRACTION = 0.20
MIN_ROWS = 20
MAX_ONSET_CANDIDATES = 400  # breakpoints tried by the leak fit (spread over the run)
MAX_POINTS = 2000  # longer runs are judged on bins of steps (each bin's median)


def training_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training rows (no ``kind``), one per step (the last written wins), by step."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        if "kind" not in row and isinstance(row.get("step"), int):
            by_step[row["step"]] = row
    return [by_step[step] for step in sorted(by_step)]


def _warmup_rows(count: int) -> int:
    return max(2, count // 20)


def _numeric(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    points = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and value == value:  # not None, not NaN
            points.append((row["step"], float(value)))
    return points


def _binned(points: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) with at most MAX_POINTS points: a long run's rows in equal bins, each
    the bin's first step and its median value (the detectors then cost the same at any
    length)."""
    steps = np.array([step for step, _ in points], dtype=np.float64)
    values = np.array([value for _, value in points], dtype=np.float64)
    if len(points) <= MAX_POINTS:
        return steps, values
    edges = np.linspace(0, len(points), MAX_POINTS + 1).astype(int)
    return (
        np.array([steps[a] for a, b in pairwise(edges) if b > a]),
        np.array([np.median(values[a:b]) for a, b in pairwise(edges) if b > a]),
    )


# ------------------------------------------------------------------------------ leak


def _hinge_fit(steps: np.ndarray, values: np.ndarray, onset: float) -> tuple[float, float]:
    """Least squares of ``value = c + k * max(0, step - onset)``: (k, squared error)."""
    x = np.maximum(0.0, steps - onset)
    dx = x - x.mean()
    sxx = float(dx @ dx)
    dy = values - values.mean()
    if sxx == 0:
        return 0.0, float(dy @ dy)
    k = float(dx @ dy) / sxx
    residual = dy - k * dx
    return k, float(residual @ residual)


def _steady(after: np.ndarray, growth_per_quarter_mb: float) -> bool:
    """Each quarter of ``after`` has a median above the previous one's by at least
    LEAK_QUARTER_SHARE of the fitted growth per quarter."""
    if len(after) < 8:
        return False
    medians = [float(np.median(part)) for part in np.array_split(after, 4)]
    needed = LEAK_QUARTER_SHARE * growth_per_quarter_mb
    return all(b - a >= needed for a, b in pairwise(medians))


def detect_leak(rows: Iterable[dict[str, Any]]) -> Finding | None:
    """A steady growth of host memory (``mem_host_mb``); see the module docstring."""
    points = _numeric(training_rows(rows), "mem_host_mb")
    if len(points) < MIN_ROWS:
        return None
    steps, values = _binned(points[_warmup_rows(len(points)) :])
    last_allowed = len(steps) - 8  # the fit after the onset needs some rows
    stride = max(1, last_allowed // MAX_ONSET_CANDIDATES)
    onsets = steps[0:last_allowed:stride] if last_allowed > 0 else steps[:0]
    fits = [(*_hinge_fit(steps, values, onset), onset) for onset in onsets]
    if not fits:
        return None
    slope_mb_per_step, _, onset_step = min(fits, key=lambda fit: fit[1])
    onset, last_step = int(onset_step), int(steps[-1])
    growth_mb = slope_mb_per_step * (last_step - onset)
    per_1k_mb = slope_mb_per_step * 1000
    if per_1k_mb < LEAK_MB_PER_1K_STEPS or growth_mb < LEAK_MIN_GROWTH_MB:
        return None
    if not _steady(values[steps >= onset], growth_mb / 4):
        return None
    return Finding(
        kind="leak",
        step=onset,
        message=(
            f"host memory grows steadily: {per_1k_mb:,.0f} MB per 1,000 steps from step "
            f"{onset} ({growth_mb:,.0f} MB by step {last_step}; a leak is flagged from "
            f"{LEAK_MB_PER_1K_STEPS:.0f} MB per 1,000 steps)"
        ),
        suggestion=(
            "check for tensors kept from step to step (a metric kept as a tensor, a list a "
            "plugin appends to), caches in the data reader, or a plugin: rerun a short run "
            "with --plugins no:NAME and compare"
        ),
        figures={
            "growth_mb_per_1k_steps": round(per_1k_mb, 1),
            "growth_mb": round(growth_mb, 1),
            "threshold_mb_per_1k_steps": LEAK_MB_PER_1K_STEPS,
        },
    )


# ------------------------------------------------------------------------------ slowdown


def _data_wait_share(row: dict[str, Any]) -> float | None:
    """The share of the step's time spent waiting for its batch, when the row says."""
    wait_s, rate = row.get("data_wait_s"), row.get("samples_per_s")
    samples, step = row.get("samples"), row.get("step")
    if not wait_s or not rate or not samples or not step:
        return None
    step_s = (samples / step) / rate
    return wait_s / step_s if step_s > 0 else None


def _median_share(rows: list[dict[str, Any]]) -> float | None:
    shares = [s for s in map(_data_wait_share, rows) if s is not None]
    return statistics.median(shares) if shares else None


def _slowdown_cause(
    all_rows: list[dict[str, Any]],
    onset: int,
    early_rows: list[dict[str, Any]],
    slow_rows: list[dict[str, Any]],
) -> str:
    """What the run's own records say about why it slowed from ``onset``, and what to
    check: the last thermal reading and micro-batch change up to the slow stretch's first
    steps, then the share of each step spent waiting for data."""
    near = slow_rows[min(len(slow_rows), 5) - 1]["step"] if slow_rows else onset
    events = [r for r in all_rows if r.get("kind") == "event" and r.get("step", 0) <= near]
    thermal = [e for e in events if e.get("event") == "thermal"]
    if thermal and thermal[-1].get("level") not in (None, "normal"):
        hot = thermal[-1]
        return (
            f"the thermal plugin reported {hot.get('level')} at step {hot['step']}: the machine "
            "throttles — cool it, plug in power, or lower the load"
        )
    changes = [e for e in events if e.get("event") == "micro_batch"]
    if changes and (changes[-1].get("new") or 0) < (changes[-1].get("old") or 0):
        last = changes[-1]
        return (
            f"the micro-batch fell from {last.get('old')} to {last.get('new')} at step "
            f"{last['step']} ({last.get('reason', 'memory')}): more accumulation steps cost "
            "speed; free memory or lower the global batch"
        )
    before, after = _median_share(early_rows) or 0.0, _median_share(slow_rows)
    if after is not None and after - before > 0.10:
        return (
            f"the loop waits for its data {after:.0%} of each step (was {before:.0%}): "
            "check the disk, or raise data.prefetch_steps for the streaming reader"
        )
    return (
        "nothing in the run's records explains it: another program may share the CPU or GPU "
        "(check top / nvidia-smi), the machine may throttle without a sensor (run with "
        "--plugins thermal), or a plugin may do more work each step"
    )


def _slow_stretches(
    rates: np.ndarray, slow_windows: np.ndarray, threshold: float, window: int
) -> list[tuple[int, int, bool]]:
    """Each run of consecutive slow windows as ``(first slow step's index, end index,
    recovered)``: it begins at the first step under ``threshold`` of its first window and
    ends with the last window that was slow (``recovered`` False: at the run's end)."""
    stretches = []
    index = 0
    while index < len(slow_windows):
        if not slow_windows[index]:
            index += 1
            continue
        start = index
        while index < len(slow_windows) and slow_windows[index]:
            index += 1
        first_slow = start + int(np.flatnonzero(rates[start : start + window] < threshold)[0])
        stretches.append((first_slow, index - 1 + window, index < len(slow_windows)))
    return stretches


def _depth(row: dict[str, Any]) -> tuple[int, int] | None:
    H_cycles, L_cycles = row.get("H_cycles"), row.get("L_cycles")
    if isinstance(H_cycles, int) and isinstance(L_cycles, int) and H_cycles > 0 and L_cycles > 0:
        return H_cycles, L_cycles
    return None


def work_rates(
    train: list[dict[str, Any]],
) -> tuple[list[tuple[int, float]], tuple[int, int] | None]:
    """(step, work per second) of the training rows with a speed, as samples per second at
    the reference depth — the depth of the first row after warm-up — and that depth (None when
    the rows record none: then plain samples/s). See the module docstring."""
    rows = [r for r in train if _numeric([r], "samples_per_s") and r["samples_per_s"] > 0]
    judged = rows[_warmup_rows(len(rows)) :]
    reference = next((d for d in map(_depth, judged) if d is not None), None)
    if reference is None:
        return [(r["step"], float(r["samples_per_s"])) for r in rows], None
    base = net_calls_per_sample(*reference)
    return [
        (
            r["step"],
            float(r["samples_per_s"]) * net_calls_per_sample(*(_depth(r) or reference)) / base,
        )
        for r in rows
    ], reference


def detect_slowdown(rows: Iterable[dict[str, Any]]) -> Finding | None:
    """Work per second (samples/s weighted by the recursion depth's work) more than 20% below
    its early median; see the module docstring."""
    all_rows = list(rows)
    train = training_rows(all_rows)
    points, reference = work_rates(train)
    if len(points) < MIN_ROWS:
        return None
    steps, rates = _binned(points[_warmup_rows(len(points)) :])
    early_count = max(5, len(rates) // 4)
    early = float(np.median(rates[:early_count]))
    threshold = (1 - SLOWDOWN_FRACTION) * early
    window = max(5, len(rates) // 10)
    medians = np.median(np.lib.stride_tricks.sliding_window_view(rates, window), axis=1)
    stretches = _slow_stretches(rates, medians < threshold, threshold, window)
    if not stretches:
        return None
    first_slow, slow_end, recovered = max(stretches, key=lambda s: (s[1] - s[0], -s[0]))
    onset, last = int(steps[first_slow]), int(steps[slow_end - 1])
    slow = float(np.median(rates[first_slow:slow_end]))
    until = f"until about step {last}" if recovered else "to the end of the run"
    early_rows = [r for r in train if r["step"] < steps[min(early_count, len(steps) - 1)]]
    slow_rows = [r for r in train if onset <= r["step"] <= last]
    cause = _slowdown_cause(all_rows, onset, early_rows, slow_rows)
    deepened = {_depth(r) or reference for r in train if r["step"] >= steps[0]} != {reference}
    figures = {
        "early_samples_per_s": round(early, 2),
        "slow_samples_per_s": round(slow, 2),
        "drop_fraction": round(1 - slow / early, 4),
    }
    if deepened and reference is not None:
        what = "work per second (samples/s weighted by each step's recursion depth)"
        unit = f" samples/s at depth {reference}"
        figures |= {"reference_H_cycles": reference[0], "reference_L_cycles": reference[1]}
    else:
        what, unit = "samples/s", ""
    return Finding(
        kind="slowdown",
        step=onset,
        message=(
            f"{what} fell {1 - slow / early:.0%} below its early median from step {onset} "
            f"{until} ({slow:,.1f} against {early:,.1f}{unit}; flagged beyond "
            f"{SLOWDOWN_FRACTION:.0%})"
        ),
        suggestion=cause,
        figures=figures,
    )


def detect(rows: Iterable[dict[str, Any]]) -> list[Finding]:
    """Every finding in a run's metrics rows (leak first, then slowdown)."""
    rows = list(rows)
    found = (detect_leak(rows), detect_slowdown(rows))
    return [finding for finding in found if finding is not None]
