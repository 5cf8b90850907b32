"""The report's summary table: one row per run — accuracy (final and best), wall time, speed,
peak memory against the run's estimate — and what the detectors found."""

from __future__ import annotations

import statistics
from typing import Any

from trm.metrics_log import per_task_figures
from trm.plugins.report.detect import detect
from trm.plugins.report.runs import Run

MB = 2**20

# Eval rows name the exact accuracy of K attempts exact_accuracy@K (trm.evaluation.attempts).
RETRIED_PREFIX = "exact_accuracy@"


def _median_speed(run: Run) -> float | None:
    """Median samples/s, leaving out the first steps (compilation, cold caches)."""
    rates = [r["samples_per_s"] for r in run.train if (r.get("samples_per_s") or 0) > 0]
    rates = rates[max(1, len(rates) // 20) :] or rates
    return round(statistics.median(rates), 2) if rates else None


def _peak(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return max(values) if values else None


def _estimate_mb(run: Run, location: str) -> float | None:
    """The run's predicted peak for ``location`` in MB (estimate.json), None if unknown."""
    if not run.estimate:
        return None
    total = run.estimate.get(f"{location}_total_bytes")
    return round(total / MB, 1) if total else None


def _best(values: list[float]) -> float | None:
    return max(values) if values else None


def _final_retried(evals: list[dict[str, Any]]) -> dict[str, Any]:
    """``eval_attempts`` K and ``final_retried_exact_accuracy`` (the last evaluation's
    ``exact_accuracy@K``) of a run evaluated with more than one attempt; None without."""
    last = evals[-1] if evals else {}
    for key, value in last.items():
        if key.startswith(RETRIED_PREFIX) and key[len(RETRIED_PREFIX) :].isdigit():
            attempts = int(key[len(RETRIED_PREFIX) :])
            return {"eval_attempts": attempts, "final_retried_exact_accuracy": value}
    return {"eval_attempts": None, "final_retried_exact_accuracy": None}


def run_summary(run: Run) -> dict[str, Any]:
    """One row of the table, as JSON-ready data (None where the run does not say)."""
    # an imported run (trm import) has no training rows yet: its step is its event rows'
    last = run.train[-1] if run.train else {"step": max(r.get("step", 0) for r in run.rows)}
    exact = [r["exact_accuracy"] for r in run.evals if "exact_accuracy" in r]
    cells = [r["cell_accuracy"] for r in run.evals if "cell_accuracy" in r]
    best_step = None
    if exact:
        best_step = next(r["step"] for r in run.evals if r.get("exact_accuracy") == max(exact))
    peak_host, host_estimate = _peak(run.train, "mem_host_mb"), _estimate_mb(run, "host")
    peak_device, device_estimate = _peak(run.train, "mem_device_mb"), _estimate_mb(run, "device")
    summary = run.summary or {}
    return {
        "run": run.label,
        "path": str(run.path),
        "steps": last["step"],
        "samples": last.get("samples"),
        "wall_s": summary.get("wall_s", last.get("wall_s")),
        "stopped": summary.get("stopped"),
        "final_exact_accuracy": exact[-1] if exact else None,
        **_final_retried(run.evals),
        "tasks": per_task_figures(run.evals[-1] if run.evals else {}),
        "best_exact_accuracy": _best(exact),
        "best_step": best_step,
        "final_cell_accuracy": cells[-1] if cells else None,
        "best_cell_accuracy": _best(cells),
        "samples_per_s": _median_speed(run),
        "data_wait_share": summary.get("data_wait_share"),
        "peak_host_mb": peak_host,
        "host_estimate_mb": host_estimate,
        "peak_host_of_estimate": (
            round(peak_host / host_estimate, 3) if peak_host and host_estimate else None
        ),
        "peak_device_mb": peak_device,
        "device_estimate_mb": device_estimate,
        "peak_device_of_estimate": (
            round(peak_device / device_estimate, 3) if peak_device and device_estimate else None
        ),
        "findings": [finding.to_json() for finding in detect(run.rows)],
        "activation_checkpointing_switches": [
            {"step": e["step"], "on": bool(e.get("on")), "reason": e.get("reason", "")}
            for e in run.events
            if e.get("event") == "activation_checkpointing"
        ],
    }
