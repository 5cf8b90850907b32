"""Learning speed: held-out exact accuracy of a spec, with or without plugins, over seeds.

Usage:
  python benchmarks/learning.py SPEC [--plugins LIST] [--set K=V]... [--label NAME]
      [--config "LABEL|PLUGINS|K=V;K=V"]... [--matrix]
      (--budget-s SECONDS | --steps N | --samples N) [--seeds 0,1]
      [--targets 0.5,0.8,0.9,0.95] [--evals 20] [--eval-examples N] [--pilot-steps 10]
      [--out DIR] [--json] [--markdown] [--from-json FILE [--curves]]

Each configuration (plugins and ``--set`` values) trains once per seed, each run a fresh
``python -m trm run`` process into ``OUT/runs/LABEL-seedS``. All runs read one dataset, built
once from the spec's recipe into ``OUT/shared/data``, so ``train.seed`` varies only the
initial weights, the sampling order and the exploration draws.

Budgets:
- ``--steps N`` / ``--samples N``: every run's schedule is N steps (samples / global batch).
- ``--budget-s T``: every run's schedule is fitted to T seconds of *training* time (the sum of
  its steps' times; evaluations do not count). A step's time depends on the recursion depth
  only (every step runs the whole global batch through one supervision step), so a pilot
  run times ``--pilot-steps`` steps at each depth a configuration uses, and each
  configuration gets the largest number of steps whose schedule (the curriculum's depths
  included) sums to at most T. The learning-rate schedule and the plugins' fractions then
  end within the budget for every configuration.

Evaluation runs ``--evals`` times per run (``train.eval_interval`` = steps / evals) and at the
end, with the EMA weights when the spec keeps them. Reported per configuration: final and
best held-out exact accuracy (mean, standard deviation over seeds, min and max), the final
held-out cell accuracy (which moves long before exact accuracy does), training time, and
for each target accuracy the training time at the first evaluation that reached it (mean
over the seeds that did, and how many did). Times come from metrics.jsonl (each
step's time is global batch / samples_per_s). ``--json`` prints one document; ``--from-json``
prints the table of a saved one, and with ``--curves`` the held-out exact accuracy (percent)
at each regular evaluation, mean over the seeds, one column per evaluation: with ``--evals N``
the columns are tenths (N = 10) of each run, whatever its step count.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import provenance
from tables import print_rows

from trm.contrib.curriculum import read_options as curriculum_options
from trm.errors import TrmError
from trm.plan.dataset import ensure_dataset
from trm.plugin_manager import load_plugins
from trm.spec import RunSpec, apply_overrides, load_spec, resolve_spec_path

Depth = tuple[int, int]

# The comparison: baseline, each curriculum schedule, adaptive halting, and both.
# Each names the research plugins it keeps off, since a spec's [plugins.NAME] table would
# switch that plugin on (sudoku9-laptop has [plugins.curriculum]).
MATRIX = (
    ("baseline", "no:curriculum,no:adaptive-halting", ()),
    (
        "curriculum-linear",
        "curriculum,no:adaptive-halting",
        ('plugins.curriculum={schedule="linear"}',),
    ),
    (
        "curriculum-staged",
        "curriculum,no:adaptive-halting",
        ('plugins.curriculum={schedule="staged"}',),
    ),
    ("adaptive-halting", "adaptive-halting,no:curriculum", ()),
    (
        "staged+halting",
        "curriculum,adaptive-halting",
        ('plugins.curriculum={schedule="staged"}',),
    ),
)
WARMUP_STEPS = 2  # pilot steps left out of the timing (allocations, first-call work)


def log(message: str) -> None:
    print(f"learning: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- configurations


def parse_config(text: str) -> tuple[str, str, tuple[str, ...]]:
    """``LABEL|PLUGINS|K=V;K=V`` (the last two parts optional) as (label, plugins, sets)."""
    parts = text.split("|")
    if not parts[0] or len(parts) > 3:
        raise SystemExit(f"--config {text!r}: expected LABEL|PLUGINS|K=V;K=V")
    plugins = parts[1].strip() if len(parts) > 1 else ""
    sets = tuple(s.strip() for s in parts[2].split(";") if s.strip()) if len(parts) > 2 else ()
    return parts[0].strip(), plugins, sets


def configurations(args: argparse.Namespace) -> list[tuple[str, str, tuple[str, ...]]]:
    """The configurations to compare: --matrix, the --config values, or the one of
    --plugins/--label (the base --set values apply to all)."""
    if args.matrix:
        return list(MATRIX)
    if not args.config:
        return [(args.label or args.plugins or "baseline", args.plugins, ())]
    configs = [parse_config(text) for text in args.config]
    for label, _plugins, sets in configs:
        if any(text.strip().startswith("data.") for text in sets):
            raise SystemExit(
                f"learning: --config {label}: every run reads the one dataset built from the "
                "spec and the global --set values; change [data] there (one benchmark per "
                "dataset), not per configuration"
            )
    return configs


def spec_for(base: RunSpec, sets: tuple[str, ...]) -> RunSpec:
    try:
        return apply_overrides(base, list(sets))
    except TrmError as exc:
        raise SystemExit(f"learning: {exc}") from None


def depth_schedule(spec: RunSpec, plugins: str):
    """``f(step, total_steps) -> (H_cycles, L_cycles)`` as the run will use them."""
    final = (spec.arch.H_cycles, spec.arch.L_cycles)
    names = [p.strip() for p in plugins.split(",")]
    on = "curriculum" in names or ("curriculum" in spec.plugins and "no:curriculum" not in names)
    if not on:
        return lambda _step, _total: final
    try:
        options = curriculum_options(spec)
    except TrmError as exc:
        raise SystemExit(f"learning: {exc}") from None
    return lambda step, total: options.depth_at(step, total, final)[0]


def schedule_time_s(depth_of, steps: int, step_s) -> float:
    """Training seconds of a ``steps``-step schedule, each step at its depth's time
    (``step_s(depth)``)."""
    counts: dict[Depth, int] = {}
    for step in range(steps):
        depth = depth_of(step, steps)
        counts[depth] = counts.get(depth, 0) + 1
    return sum(step_s(depth) * count for depth, count in counts.items())


def steps_for_budget(depth_of, budget_s: float, step_s) -> int:
    """The most steps whose schedule fits in ``budget_s`` (at least 1); the schedule's time
    grows with its length, so a bisection finds it."""
    fastest = min(step_s(depth_of(step, 1000)) for step in range(0, 1000, 10))
    low, high = 1, max(2, int(budget_s / fastest) + 1)
    while low < high:
        middle = (low + high + 1) // 2
        if schedule_time_s(depth_of, middle, step_s) <= budget_s:
            low = middle
        else:
            high = middle - 1
    return low


# ---------------------------------------------------------------- runs


def trm_run(
    spec_arg: str,
    run_dir: Path,
    plugins: str,
    sets: list[str],
    timeout_s: float | None,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One ``python -m trm run`` process; its log is next to the run directory."""
    command = [sys.executable, "-m", "trm", "run", spec_arg, "--out", str(run_dir)]
    command += ["--resume", "never", "--replace", *extra]
    if plugins:
        command += ["--plugins", plugins]
    for text in sets:
        command += ["--set", text]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.with_name(run_dir.name + ".log")
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with log_path.open("w") as out:
        try:
            done = subprocess.run(command, stdout=out, stderr=out, timeout=timeout_s, check=False)
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
        raise SystemExit(f"learning: {' '.join(command)} failed ({code}):\n" + "\n".join(tail))
    return {
        "process_s": round(time.perf_counter() - started, 1),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_times_s(rows: list[dict[str, Any]], global_batch: int) -> dict[int, float]:
    """Each training step's time (data wait included), by step number."""
    return {
        row["step"]: global_batch / row["samples_per_s"]
        for row in rows
        if "kind" not in row and row.get("samples_per_s")
    }


def learning_curve(rows: list[dict[str, Any]], global_batch: int) -> list[dict[str, float]]:
    """Evaluations as (step, training seconds so far, exact and cell accuracy)."""
    times = step_times_s(rows, global_batch)
    elapsed, so_far = {}, 0.0
    for step in sorted(times):
        so_far += times[step]
        elapsed[step] = so_far
    return [
        {
            "step": row["step"],
            "train_s": round(elapsed.get(row["step"], 0.0), 2),
            "exact_accuracy": row["exact_accuracy"],
            "cell_accuracy": row["cell_accuracy"],
        }
        for row in rows
        if row.get("kind") == "eval"
    ]


def time_to(curve: list[dict[str, float]], target: float) -> float | None:
    """Training seconds at the first evaluation with exact accuracy >= ``target``."""
    for point in curve:
        if point["exact_accuracy"] >= target:
            return point["train_s"]
    return None


class PilotTimes:
    """Step time by depth, each measured once, when first asked for, by a short run of the
    spec at that depth (median over ``steps`` steps after WARMUP_STEPS)."""

    def __init__(self, spec_arg: str, out: Path, sets: list[str], steps: int) -> None:
        self.spec_arg, self.out, self.sets, self.steps = spec_arg, out, sets, steps
        self.measured: dict[Depth, float] = {}

    def __call__(self, depth: Depth) -> float:
        if depth not in self.measured:
            self.measured[depth] = self.measure(depth)
        return self.measured[depth]

    def measure(self, depth: Depth) -> float:
        H_cycles, L_cycles = depth
        run_dir = self.out / "pilot" / f"H{H_cycles}-L{L_cycles}"
        sets = [*self.sets, f"arch.H_cycles={H_cycles}", f"arch.L_cycles={L_cycles}"]
        sets.append("train.eval_interval=0")
        total = self.steps + WARMUP_STEPS
        log(f"pilot: timing {self.steps} steps at depth {depth}")
        trm_run(self.spec_arg, run_dir, "", sets, None, ("--max-steps", str(total)))
        spec = load_spec(run_dir / "spec.toml")
        times = step_times_s(read_rows(run_dir), spec.train.global_batch_size)
        step_s = statistics.median(times[s] for s in sorted(times) if s > WARMUP_STEPS)
        log(f"pilot: depth {depth}: {step_s:.3f} s per step")
        return step_s


def run_configuration(
    args: argparse.Namespace,
    base: RunSpec,
    base_sets: list[str],
    data_dir: Path,
    label: str,
    plugins: str,
    sets: tuple[str, ...],
    step_s: PilotTimes | None,
) -> dict[str, Any]:
    spec = spec_for(base, sets)
    depth_of = depth_schedule(spec, plugins)
    global_batch = spec.train.global_batch_size
    if step_s is not None:
        steps = steps_for_budget(depth_of, args.budget_s, step_s)
        planned_s = schedule_time_s(depth_of, steps, step_s)
    else:
        steps = args.steps or math.ceil(args.samples / global_batch)
        planned_s = None
    eval_interval = max(1, steps // args.evals)
    run_sets = [*base_sets, *sets, f"data.dir={data_dir}", f"train.max_steps={steps}"]
    run_sets.append(f"train.eval_interval={eval_interval}")
    if args.eval_examples:
        run_sets.append(f"train.eval_max_examples={args.eval_examples}")
    timeout_s = None if not args.budget_s else 4 * args.budget_s + 900
    runs = []
    for seed in args.seeds:
        run_dir = args.out / "runs" / f"{label}-seed{seed}"
        log(f"{label}: seed {seed}, {steps} steps, evaluation every {eval_interval}")
        process = trm_run(args.spec, run_dir, plugins, [*run_sets, f"train.seed={seed}"], timeout_s)
        rows = read_rows(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        curve = learning_curve(rows, global_batch)
        runs.append(
            {
                "seed": seed,
                "steps": summary["steps"],
                "final_exact_accuracy": summary["final_exact_accuracy"],
                "best_exact_accuracy": summary["best_exact_accuracy"],
                "train_s": round(sum(step_times_s(rows, global_batch).values()), 2),
                "wall_s": summary["wall_s"],
                "time_to_s": {str(t): time_to(curve, t) for t in args.targets},
                "curve": curve,
                **process,
            }
        )
    return {
        "label": label,
        "plugins": plugins,
        "sets": list(sets),
        "steps": steps,
        "planned_train_s": None if planned_s is None else round(planned_s, 1),
        "eval_interval": eval_interval,
        "runs": runs,
        "summary": summarize(runs, args.targets),
    }


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def final_cell_accuracy(run: dict[str, Any]) -> float:
    """Held-out cell accuracy at a run's last evaluation (0 when none ran)."""
    return run["curve"][-1]["cell_accuracy"] if run["curve"] else 0.0


def summarize(runs: list[dict[str, Any]], targets: list[float]) -> dict[str, Any]:
    """Mean, spread and reach over the seeds of one configuration."""
    reached = {}
    for target in targets:
        times = [r["time_to_s"][str(target)] for r in runs]
        hit = [t for t in times if t is not None]
        reached[str(target)] = {
            "mean_s": statistics.fmean(hit) if hit else None,
            "reached": len(hit),
        }
    return {
        "seeds": len(runs),
        "final_exact_accuracy": spread([r["final_exact_accuracy"] or 0.0 for r in runs]),
        "best_exact_accuracy": spread([r["best_exact_accuracy"] or 0.0 for r in runs]),
        "final_cell_accuracy": spread([final_cell_accuracy(r) for r in runs]),
        "train_s": spread([r["train_s"] for r in runs]),
        "time_to": reached,
    }


# ---------------------------------------------------------------- output


def table_rows(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    targets = document["targets"]
    headers = ["config", "plugins", "steps", "train s", "final exact (mean ± sd)", "min-max"]
    headers += ["best exact", "final cell"] + [f"t→{t:.0%}" for t in targets]
    rows = []
    for config in document["configs"]:
        s = config["summary"]
        final = s["final_exact_accuracy"]
        row = [
            config["label"],
            config["plugins"] or "-",
            str(config["steps"]),
            f"{s['train_s']['mean']:.0f}",
            f"{final['mean']:.1%} ± {final['std']:.1%}",
            f"{final['min']:.1%}-{final['max']:.1%}",
            f"{s['best_exact_accuracy']['mean']:.1%}",
            f"{final_cell_accuracy_mean(config):.1%}",
        ]
        for target in targets:
            reach = s["time_to"][str(target)]
            if reach["mean_s"] is None:
                row.append(f"- (0/{s['seeds']})")
            else:
                row.append(f"{reach['mean_s']:.0f} s ({reach['reached']}/{s['seeds']})")
        rows.append(row)
    return headers, rows


def final_cell_accuracy_mean(config: dict[str, Any]) -> float:
    """Mean final cell accuracy over the seeds (recomputed, so older documents print too)."""
    return statistics.fmean(final_cell_accuracy(r) for r in config["runs"])


def curve_rows(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per configuration, the mean over seeds of the held-out exact accuracy (percent) at the
    k-th regular evaluation (step k x eval_interval), for k = 1 .. N; the end-of-run
    evaluation that follows when the steps are not a multiple of the interval is left out."""
    counts = []
    rows = []
    for config in document["configs"]:
        interval = config["eval_interval"]
        by_k: dict[int, list[float]] = {}
        for run in config["runs"]:
            for point in run["curve"]:
                if point["step"] % interval == 0:
                    by_k.setdefault(point["step"] // interval, []).append(point["exact_accuracy"])
        complete = [k for k, values in sorted(by_k.items()) if len(values) == len(config["runs"])]
        counts.append(len(complete))
        means = [100 * statistics.fmean(by_k[k]) for k in complete]
        rows.append([config["label"], *(f"{mean:.1f}" for mean in means)])
    evals = min(counts)
    headers = ["config", *(f"{k}/{evals}" for k in range(1, evals + 1))]
    return headers, [row[: 1 + evals] for row in rows]


def print_table(document: dict[str, Any], markdown: bool, curves: bool = False) -> None:
    headers, rows = curve_rows(document) if curves else table_rows(document)
    budget = document["budget"]
    print(f"{document['spec']}: {budget}, seeds {document['seeds']}, {document['machine']}")
    print_rows(headers, rows, markdown)


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} CPUs"


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", help="a TOML file or a shipped spec's name")
    parser.add_argument("--plugins", default="", help="plugins of the one configuration")
    parser.add_argument("--set", action="append", default=[], help="K=V for every run")
    parser.add_argument("--label", default="", help="name of the one configuration")
    parser.add_argument("--config", action="append", default=[], help="LABEL|PLUGINS|K=V;K=V")
    parser.add_argument("--matrix", action="store_true", help="the five configurations of MATRIX")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float, help="training seconds per run (fitted)")
    budget.add_argument("--steps", type=int, help="steps per run")
    budget.add_argument("--samples", type=int, help="samples per run")
    parser.add_argument("--seeds", default="0,1", help="train.seed values, comma-separated")
    parser.add_argument("--targets", default="0.5,0.8,0.9,0.95")
    parser.add_argument("--evals", type=int, default=20, help="evaluations per run")
    parser.add_argument("--eval-examples", type=int, default=0, help="0: the spec's")
    parser.add_argument("--pilot-steps", type=int, default=10)
    parser.add_argument("--out", type=Path, help="default runs/learning-<spec name>")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--from-json", metavar="FILE", help="table of a saved --json document")
    parser.add_argument(
        "--curves", action="store_true", help="with --from-json: mean exact accuracy per eval"
    )
    args = parser.parse_args(argv)
    if not args.from_json:
        if not args.spec:
            parser.error("give a spec (or --from-json FILE)")
        if not (args.budget_s or args.steps or args.samples):
            parser.error("give one budget: --budget-s, --steps or --samples")
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.targets = [float(t) for t in args.targets.split(",") if t.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        print_table(json.loads(Path(args.from_json).read_text()), args.markdown, args.curves)
        return 0
    try:
        base = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    except TrmError as exc:
        raise SystemExit(f"learning: {exc}") from None
    args.out = (args.out or Path("runs") / f"learning-{base.name}").resolve()
    configs = configurations(args)
    data_dir = ensure_dataset(load_plugins(), base, args.out / "shared", log)
    step_s = None
    if args.budget_s:
        pilot_sets = [*args.set, f"data.dir={data_dir}"]
        step_s = PilotTimes(args.spec, args.out, pilot_sets, args.pilot_steps)
    results = [
        run_configuration(args, base, args.set, data_dir, label, plugins, sets, step_s)
        for label, plugins, sets in configs
    ]
    if args.budget_s:
        budget = f"{args.budget_s:g} s of training per run"
    elif args.steps:
        budget = f"{args.steps} steps per run"
    else:
        budget = f"{args.samples} samples per run"
    document = {
        "spec": base.name,
        "budget": budget,
        "budget_s": args.budget_s,
        "seeds": args.seeds,
        "targets": args.targets,
        "machine": machine(),
        "pilot_step_s": {
            f"{H},{L}": t for (H, L), t in sorted(step_s.measured.items() if step_s else [])
        },
        "configs": results,
        "provenance": provenance(),
    }
    (args.out / "learning.json").write_text(json.dumps(document, indent=2) + "\n")
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_table(document, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
