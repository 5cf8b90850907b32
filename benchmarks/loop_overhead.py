"""The training loop's own time per step: trm's real loop against its bare optimizer step.

Usage: python benchmarks/loop_overhead.py [--spec quickstart] [--batch 32] [--steps 60]
[--warmup 5] [--rounds 2] [--compile on|off] [--threads 2] [--profile] [--out FILE]

In one process, alternated A B A B: (A) the real loop (:class:`trm.loop.Trainer`, as ``trm
run``: the data reader, metrics rows and metrics.jsonl, every default plugin's hooks, the
memory reading, evaluation and checkpoints off) timed per step from ``on_step``; (B) the same
step with nothing around it: :func:`trm.loop.step.attempt_step` (zero the gradients, one
supervision step, the ACT loss, backward, the learning rate, the optimizer steps, EMA, the
step's one host read) on batches gathered up front, on the same model (the backend's MLP
layout, the runtime's precision and compile; :func:`step_profile.attempt_steps`), seed and
data. Each round builds both afresh; the first ``warmup`` steps of each are left out
(compilation happens there). The loop's own time is the
median A step less the median B step.

``--profile`` adds a cProfile of one more real loop: its seconds per step around
``attempt_step`` (the loop's own work: the batch, the metrics row, the memory reading, every
plugin's hooks) beside the step's, and the trm functions of most own time. The load
(``uptime``) is recorded before and after.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance, step_profile

import attrs
import step_profile
from provenance import load, provenance

from trm.measure.loop_timing import bench_spec, small_data_spec, time_loop
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import choose_runtime, detect_hardware
from trm.plugin_manager import load_plugins
from trm.spec import apply_overrides, load_spec, resolve_spec_path

LOOP_PLUGINS_OFF = ("no:checkpoint",)  # the loop as a run has it, less checkpoint writes


def bare_steps(spec, runtime, data_dir: Path, total: int) -> list[float]:
    """Seconds of each of ``total`` bare optimizer steps (see the module docstring)."""
    batch = spec.train.global_batch_size
    step = step_profile.attempt_steps(spec, runtime, data_dir, batch, total, total)
    seconds = []
    for _ in range(total):
        started = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - started)
    return seconds


def profile_loop(spec, runtime, data_dir: Path, root: Path, steps: int) -> dict[str, Any]:
    """One more real loop under cProfile: its seconds per step in the loop's own work (the
    step's bookkeeping around ``attempt_step`` in ``Trainer.take_step``: the batch, the metrics
    row and its line in metrics.jsonl, the memory reading; and ``Trainer.after_step``: every
    plugin's ``on_step``, requests, the display) beside ``attempt_step``'s, and the 15 trm
    functions of most own time (inside the step too)."""
    profiler = cProfile.Profile()
    profiler.enable()
    time_loop(spec, runtime, list(LOOP_PLUGINS_OFF), data_dir, root / "profiled", 0)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def cumulative(name: str, file_end: str) -> float:
        return sum(v[3] for k, v in stats.items() if k[2] == name and k[0].endswith(file_end))

    step_s = cumulative("attempt_step", "step.py")
    take_s = cumulative("take_step", "loop.py")
    after_s = cumulative("after_step", "loop.py")
    rows = []
    for (filename, line, name), (_, calls, own, total, _) in stats.items():
        if not any(part in filename for part in ("/trm/", "/core/", "/plugins/")):
            continue
        rows.append({"function": f"{Path(filename).name}:{line}({name})", "calls": calls,
                     "own_s": round(own, 4), "cumulative_s": round(total, 4)})  # fmt: skip
    rows.sort(key=lambda r: -r["own_s"])
    return {
        "steps": steps,
        "attempt_step_s_per_step": step_s / steps,
        "take_step_outside_attempt_s_per_step": (take_s - step_s) / steps,
        "after_step_s_per_step": after_s / steps,
        "loop_own_share_of_step": (take_s - step_s + after_s) / (take_s + after_s),
        "top_functions_by_own_time": rows[:15],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="quickstart")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compile", choices=("on", "off"), default="off")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    spec = load_spec(resolve_spec_path(args.spec))
    spec = apply_overrides(
        spec, [f"runtime.compile={args.compile}", f"runtime.threads={args.threads}"]
    )
    pm = load_plugins(list(LOOP_PLUGINS_OFF))
    runtime = choose_runtime(pm, spec, detect_hardware(pm))
    total = args.warmup + args.steps
    timed = bench_spec(spec, args.batch, total)
    timed = attrs.evolve(timed, train=attrs.evolve(timed.train, eval_interval=0))
    document: dict[str, Any] = {
        "kind": "trm-loop-overhead",
        "provenance": provenance(),
        "spec": args.spec,
        "batch": args.batch,
        "precision": runtime.precision,
        "compiled": runtime.compile,
        "threads": runtime.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "load_before": load(),
        "rounds": [],
    }
    with tempfile.TemporaryDirectory(prefix="trm-loop-overhead-") as folder:
        root = Path(folder)
        data_dir = ensure_dataset(pm, small_data_spec(timed, pm, args.batch * 4), root, print)
        for round_ in range(args.rounds):
            loop = time_loop(timed, runtime, list(LOOP_PLUGINS_OFF), data_dir,
                             root / f"loop-{round_}", args.warmup)  # fmt: skip
            bare = bare_steps(timed, runtime, data_dir, total)[args.warmup :]
            document["rounds"].append(
                {
                    "loop_step_s_median": statistics.median(loop.step_s),
                    "bare_step_s_median": statistics.median(bare),
                }
            )
            print(json.dumps(document["rounds"][-1]), file=sys.stderr, flush=True)
        if args.profile:
            document["profile"] = profile_loop(timed, runtime, data_dir, root, total)
    loop_s = statistics.median(r["loop_step_s_median"] for r in document["rounds"])
    bare_s = statistics.median(r["bare_step_s_median"] for r in document["rounds"])
    document["loop_step_s"] = loop_s
    document["bare_step_s"] = bare_s
    document["loop_own_s"] = loop_s - bare_s
    document["loop_own_share"] = (loop_s - bare_s) / loop_s
    document["load_after"] = load()
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
