"""Test-time exploration's accuracy against the trajectories it costs (docs/test-time.md).

Usage:
  python benchmarks/explore.py MODEL [--kind NAME] [--puzzles N] [--seed S]
      [--max-explore N] [--noise S1[:N1],S2[:N2],…] [--each-rule] [--timing-puzzles N]
      [--batch-size N] [--out FILE] [--png FILE] [--json]
  python benchmarks/explore.py --from FILE [--png FILE] [--markdown]
      [--table accuracy|selection|summary|tasks|both]

MODEL is a shipped model's name or a run directory. The puzzles are fresh: the shipped
model's manifest kind ``--kind`` (default its last kind; for a run, the run's own
``[data.generate]`` options) built again with ``--puzzles`` held-out puzzles from ``--seed``,
which must differ from the seed the model was trained on and from every manifest kind's seed
(the puzzles it was chosen on or already scored on).

For each noise scale one evaluation with ``--max-explore`` trajectories gives the exact
accuracy of every selection rule and of the oracle (a trajectory is right) at every N = 1, 2,
4, … up to ``--max-explore``: the first N trajectories of a run of more are what a run of N
explores (each trajectory's noise is drawn apart, the first is noise-free); a scale written
``SCALE:N`` runs N trajectories instead of ``--max-explore`` (a long curve for one scale,
shorter ones for the others). Seconds per
puzzle are timed apart for each N on the first ``--timing-puzzles`` puzzles (the noise does
not change the cost). ``--out`` writes the results document (with
benchmarks/provenance.py's block), ``--png`` the curve; prints the tables — accuracy against
N, and per scale at its largest N each rule beside the oracle with the share of the rule's
failures that are selection failures (a trajectory was right) — or the document with
``--json``. ``--from FILE`` prints (and draws) a document again without measuring.

A task whose data source scores whole tasks (ARC: ``pass@K`` from the vote over a test input's
augmented versions) is scored that way too: for each noise scale, N and rule, one evaluation
of N trajectories whose chosen answers feed the task's evaluator (as ``trm eval --explore N
--select RULE`` does), kept as ``task_rows`` (every ``pass@K``); the table ``--table tasks``
and the curve show its primary metric. The row-level figures (each augmented test input right
or not) stay in ``rows``. For ARC "fresh" is fresh augmentations: the tasks are the dataset's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
from provenance import provenance
from tables import print_rows

import trm
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.evaluation.evaluate import evaluate
from trm.evaluation.explore import (
    CURVE_PREFIX,
    ORACLE,
    Exploration,
    curve_sizes,
    plan_exploration,
)
from trm.plan.dataset import build_options
from trm.spec import CONVERTER


def puzzle_options(model: Any, kind: str | None, puzzles: int) -> tuple[str, dict[str, Any]]:
    """The kind's name and its generate options with ``puzzles`` held-out puzzles."""
    if model.manifest is not None:
        kinds = model.manifest.kinds
        chosen = kinds[-1] if kind is None else next((k for k in kinds if k.kind == kind), None)
        if chosen is None:
            names = ", ".join(repr(k.kind) for k in kinds)
            raise SystemExit(f"--kind {kind!r}: the manifest's kinds are {names}")
        name, options = chosen.kind, dict(chosen.options)
    else:
        name, options = "the run's own", dict(model.spec.data.generate)
    if not scores_whole_tasks(model.source):
        options["test_count"] = puzzles
        options["count"] = 1  # the train split is not read
    return name, options


def scores_whole_tasks(source: Any) -> bool:
    """Whether the source scores whole tasks (an ``evaluator``: ARC, whose held-out rows are
    its tasks' test inputs in all their versions, so ``--puzzles`` cannot size them)."""
    return callable(getattr(source, "evaluator", None))


def used_seeds(model: Any) -> set[int]:
    """The seeds the model was trained on and its manifest's kinds were built from."""
    seeds = {int(model.spec.train.seed)}
    if model.manifest is not None:
        seeds.add(int(model.manifest.seed))
        seeds.update(int(k.seed) for k in model.manifest.kinds)
    return seeds


def run_evaluation(
    model: Any,
    index: SplitIndex,
    exploration: Exploration,
    puzzles: int,
    batch_size: int,
    task_evaluator: Any = None,
    task_metrics: Any = None,
) -> tuple[dict[str, float], float]:
    """The figures of one evaluation of the first ``puzzles`` and its seconds per puzzle
    (with ``task_evaluator``, its whole-task figures too)."""
    started_s = time.perf_counter()
    result = evaluate(
        model.module,
        index,
        model.spec.arch.halt_max_steps,
        batch_size,
        model.runtime.placement(),
        max_examples=puzzles,
        task_metrics=task_metrics,
        task_evaluator=task_evaluator,
        exploration=exploration,
    )
    return result, (time.perf_counter() - started_s) / max(int(result["examples"]), 1)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    model = trm.load(args.model)
    if args.seed in used_seeds(model):
        raise SystemExit(
            f"--seed {args.seed}: the model was trained or scored on puzzles of seeds "
            f"{sorted(used_seeds(model))}; choose another for fresh puzzles"
        )
    kind, options = puzzle_options(model, args.kind, args.puzzles)
    if scores_whole_tasks(model.source):
        args.puzzles = 0  # every row: each task's test inputs in all their versions
    source = model.source
    built = build_options(source, options, "benchmarks/explore.py")
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    timing: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="trm-explore-") as tmp:
        source.build(built, Path(tmp), args.seed, lambda _line: None)
        index = SplitIndex(open_split(Path(tmp) / model.spec.data.eval_split))

        def scored(exploration: Exploration) -> dict[str, float]:
            """One evaluation of the fresh puzzles, with the task's own metrics."""
            task_metrics = getattr(source, "task_metrics", None)
            return run_evaluation(
                model, index, exploration, args.puzzles, args.batch_size, task_metrics=task_metrics
            )[0]

        for noise in args.noise:
            trajectories = args.trajectories.get(noise, args.max_explore)
            exploration = plan_exploration(
                model.pm, source, trajectories, noise, None, args.explore_seed
            )
            result = scored(exploration)
            summaries.append(summary(noise, trajectories, exploration, result))
            for name, value in result.items():
                if name.startswith(CURVE_PREFIX):
                    size, rule = name[len(CURVE_PREFIX) :].split("/")
                    rows.append(
                        {"noise": noise, "trajectories": int(size), "rule": rule, "exact": value}
                    )
            if args.each_rule:
                for rule in exploration.curve_rules:
                    if rule.name == exploration.rule.name:
                        continue
                    other = plan_exploration(
                        model.pm, source, trajectories, noise, rule.name, args.explore_seed
                    )
                    other = attrs.evolve(other, curve_rules=())
                    summaries.append(summary(noise, trajectories, other, scored(other)))
            print(f"noise {noise:g}: done", file=sys.stderr)
        task_rows = score_tasks(model, index, Path(tmp), rows, args)
        for size in curve_sizes(longest(args)):
            exploration = plan_exploration(
                model.pm, source, size, args.noise[0], None, args.explore_seed
            )
            # timed as trm eval runs it: the default rule only, no per-N figures of every rule
            exploration = attrs.evolve(exploration, curve_rules=())
            result, seconds = run_evaluation(
                model, index, exploration, args.timing_puzzles, args.batch_size
            )
            timing.append(
                {
                    "trajectories": size,
                    "puzzles": int(result["examples"]),
                    "seconds_per_puzzle": seconds,
                }
            )
            print(f"{size} trajectories: {seconds:.3f} s a puzzle", file=sys.stderr)
    return {
        "model": args.model,
        "step": model.step,
        "kind": kind,
        "options": CONVERTER.unstructure(built),
        "seed": args.seed,
        "puzzles": args.puzzles,
        "explore_seed": args.explore_seed,
        "noise": args.noise,
        "max_explore": longest(args),
        "trajectories_per_noise": {
            f"{n:g}": args.trajectories.get(n, args.max_explore) for n in args.noise
        },
        "batch_size": args.batch_size,
        "device": model.runtime.device,
        "rows": rows,
        "summaries": summaries,
        **({"task_rows": task_rows, "task_metric": source.primary_metric} if task_rows else {}),
        "timing": timing,
        "provenance": provenance(),
    }


# The figures of a noise scale's evaluation kept beside its curve: the plain trajectory's Q
# head (whether q_halt >= 0 agrees with its answer being right, and the step it first asks to
# halt), the oracle, and a task's own metrics of the chosen answers (a maze's valid and
# optimal paths).
SUMMARY_KEYS = (
    "exact_accuracy",
    "oracle_exact_accuracy",
    "q_halt_accuracy",
    "mean_halt_steps",
    "valid_path_rate",
    "optimal_path_rate",
)


def summary(
    noise: float, trajectories: int, exploration: Exploration, result: dict[str, float]
) -> dict[str, Any]:
    """One noise scale's evaluation at its largest N: its rule (the task's default, or each
    rule with ``--each-rule``) and :data:`SUMMARY_KEYS` (those it has)."""
    rule = exploration.rule.name if exploration.rule is not None else None
    kept = {key: result[key] for key in SUMMARY_KEYS if key in result}
    return {"noise": noise, "trajectories": trajectories, "rule": rule, **kept}


def score_tasks(
    model: Any, index: SplitIndex, data_dir: Path, rows: list[dict[str, Any]], args: Any
) -> list[dict[str, Any]]:
    """Where the model's data source scores whole tasks (an ``evaluator`` for the split: ARC),
    its figures for every noise scale, N and rule of ``rows`` (one evaluation each, the
    chosen answers fed to a fresh evaluator; N = 1 is the plain run, the same for every
    rule); [] for a source without one."""
    factory = getattr(model.source, "evaluator", None)
    if not callable(factory) or factory(data_dir, model.spec.data.eval_split) is None:
        return []
    task_rows: list[dict[str, Any]] = []
    for noise in args.noise:
        at_noise = [r for r in rows if r["noise"] == noise and r["rule"] != ORACLE]
        for size in sorted({r["trajectories"] for r in at_noise}):
            for rule in sorted({r["rule"] for r in at_noise}):
                exploration = plan_exploration(
                    model.pm,
                    model.source,
                    size,
                    noise,
                    rule if size > 1 else None,
                    args.explore_seed,
                )
                exploration = attrs.evolve(exploration, curve_rules=())
                evaluator = factory(data_dir, model.spec.data.eval_split)
                result, _ = run_evaluation(
                    model, index, exploration, args.puzzles, args.batch_size, evaluator
                )
                figures = {k: v for k, v in result.items() if k.startswith("pass@")}
                task_rows.append({"noise": noise, "trajectories": size, "rule": rule, **figures})
            print(f"noise {noise:g}, {size} trajectories: tasks scored", file=sys.stderr)
    return task_rows


def longest(args: argparse.Namespace) -> int:
    """The most trajectories any noise scale runs."""
    return max(args.trajectories.get(n, args.max_explore) for n in args.noise)


def noise_scales(text: str) -> tuple[list[float], dict[float, int]]:
    """``S1[:N1],S2[:N2],…``: the scales and the trajectories of those given one."""
    scales, trajectories = [], {}
    for item in text.split(","):
        scale, _, count = item.partition(":")
        scales.append(float(scale))
        if count:
            trajectories[float(scale)] = int(count)
    return scales, trajectories


def draw(document: dict[str, Any], path: Path) -> None:
    """Exact accuracy against trajectories (log 2 axis), one panel per noise scale: a line per
    selection rule, the oracle dashed; the seconds per puzzle written under the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scales = document["noise"]
    metric = document.get("task_metric")
    points_of = document.get("task_rows") if metric else document["rows"]
    value = metric or "exact"
    figure, panels = plt.subplots(
        1, len(scales), figsize=(4.2 * len(scales), 4.2), sharey=True, squeeze=False
    )
    rules = sorted({r["rule"] for r in points_of} - {ORACLE})
    rules += [ORACLE] if any(r["rule"] == ORACLE for r in points_of) else []
    colours = dict(zip(rules, plt.get_cmap("tab10").colors, strict=False))
    for axes, noise in zip(panels[0], scales, strict=True):
        for rule in rules:
            points = sorted(
                (r["trajectories"], r[value])
                for r in points_of
                if r["noise"] == noise and r["rule"] == rule
            )
            oracle = rule == ORACLE
            axes.plot(
                [p[0] for p in points],
                [100 * p[1] for p in points],
                "--" if oracle else "-",
                marker="o",
                color="black" if oracle else colours[rule],
                label=rule,
            )
        axes.set_xscale("log", base=2)
        axes.set_xlabel("trajectories per puzzle (N)")
        axes.set_title(f"noise {noise:g}", fontsize=10)
        axes.grid(True, alpha=0.3)
    panels[0][0].set_ylabel(f"{metric} (% of tasks)" if metric else "exact accuracy (%)")
    panels[0][-1].legend(fontsize=8)
    cost = ", ".join(
        f"N={t['trajectories']}: {t['seconds_per_puzzle']:.3g} s" for t in document["timing"]
    )
    figure.suptitle(
        f"{document['model']}: {document['puzzles']} fresh puzzles (options of "
        f"{document['kind']!r}, seed {document['seed']})",
        fontsize=10,
    )
    figure.text(0.01, 0.01, f"seconds per puzzle ({document['device']}): {cost}", fontsize=7)
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def accuracy_table(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per noise scale and rule (the oracle last), the exact accuracy at every N measured."""
    sizes = sorted({r["trajectories"] for r in document["rows"]})
    rules = [*sorted({r["rule"] for r in document["rows"]} - {ORACLE}), ORACLE]
    table = []
    for noise in document["noise"]:
        for rule in rules:
            exact = {
                r["trajectories"]: r["exact"]
                for r in document["rows"]
                if r["noise"] == noise and r["rule"] == rule
            }
            table.append(
                [f"{noise:g}", rule, *(f"{exact[n]:.1%}" if n in exact else "" for n in sizes)]
            )
    seconds = {t["trajectories"]: t["seconds_per_puzzle"] for t in document["timing"]}
    table.append(
        ["", "seconds per puzzle", *(f"{seconds[n]:.3g}" if n in seconds else "" for n in sizes)]
    )
    return ["noise", "rule", *(f"N={n}" for n in sizes)], table


def selection_table(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per noise scale at its largest N, each rule's exact accuracy, the oracle's, and the
    share of the rule's failures that are selection failures (a trajectory was right: the
    oracle's lead over the rule, of the puzzles the rule failed)."""
    table = []
    for noise in document["noise"]:
        rows = [r for r in document["rows"] if r["noise"] == noise]
        largest = max(r["trajectories"] for r in rows)
        at = {r["rule"]: r["exact"] for r in rows if r["trajectories"] == largest}
        oracle = at[ORACLE]
        for rule in sorted(set(at) - {ORACLE}, key=lambda name: (-at[name], name)):
            failed = 1.0 - at[rule]
            share = f"{(oracle - at[rule]) / failed:.0%}" if failed > 0 else "none failed"
            table.append(
                [f"{noise:g}", str(largest), rule, f"{at[rule]:.1%}", f"{oracle:.1%}", share]
            )
    return ["noise", "N", "rule", "exact", "oracle", "selection failures"], table


def summary_table(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per noise scale and summarised rule, at its largest N: exact, the oracle, the plain
    trajectory's Q-head agreement and mean halting step, and the task's own metrics of the
    chosen answers (a maze's valid and optimal paths), those the document has."""
    summaries = document.get("summaries", [])
    keys = [k for k in SUMMARY_KEYS if any(k in s for s in summaries)]
    table = []
    for item in summaries:
        cells = []
        for key in keys:
            value = item.get(key)
            if value is None:
                cells.append("")
            elif key == "mean_halt_steps":
                cells.append(f"{value:.2f}")
            else:
                cells.append(f"{value:.1%}")
        table.append([f"{item['noise']:g}", str(item["trajectories"]), str(item["rule"]), *cells])
    return ["noise", "N", "rule", *keys], table


def task_table(document: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per noise scale and rule, the task metric (ARC's pass@2) at every N measured; empty
    for a document without whole-task figures."""
    metric, task_rows = document.get("task_metric"), document.get("task_rows", [])
    sizes = sorted({r["trajectories"] for r in task_rows})
    table = []
    for noise in document["noise"]:
        for rule in sorted({r["rule"] for r in task_rows}):
            value = {
                r["trajectories"]: r.get(metric)
                for r in task_rows
                if r["noise"] == noise and r["rule"] == rule
            }
            cells = (f"{value[n]:.1%}" if value.get(n) is not None else "" for n in sizes)
            table.append([f"{noise:g}", rule, str(metric), *cells])
    return ["noise", "rule", "metric", *(f"N={n}" for n in sizes)], table


def print_markdown(header: list[str], table: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in table:
        print("| " + " | ".join(row) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="a shipped model's name or a run directory")
    parser.add_argument(
        "--from", dest="source", type=Path, help="print (and draw) a results document again"
    )
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument(
        "--table",
        choices=("accuracy", "selection", "summary", "tasks", "both"),
        default="both",
        help=(
            "which table to print: accuracy against N, the selection failures, both, each "
            "scale's summary at its largest N (Q head, a maze's paths), or the whole-task "
            "metric against N (ARC's pass@2)"
        ),
    )
    parser.add_argument("--kind", help="the manifest kind to build fresh (default: its last)")
    parser.add_argument("--puzzles", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=43, help="the fresh puzzles' build seed")
    parser.add_argument("--max-explore", type=int, default=64)
    parser.add_argument(
        "--noise",
        type=noise_scales,
        default=([0.1, 0.3, 1.0], {}),
        help="comma-separated noise scales (standard deviations), each SCALE or SCALE:N",
    )
    parser.add_argument("--explore-seed", type=int, default=0)
    parser.add_argument(
        "--each-rule",
        action="store_true",
        help=(
            "evaluate each scale's largest N once per rule (not only the task's default), so "
            "every rule's summary (a maze's valid and optimal paths) is kept"
        ),
    )
    parser.add_argument("--timing-puzzles", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=512, help="rows per forward")
    parser.add_argument("--out", type=Path, help="write the results document here")
    parser.add_argument("--png", type=Path, help="draw the curve here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.noise, args.trajectories = args.noise
    if args.source is not None:
        document = json.loads(args.source.read_text(encoding="utf-8"))
    elif args.model is None:
        parser.error("give MODEL to measure, or --from FILE to print a document again")
    else:
        document = measure(args)
    if args.out is not None:
        args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if args.png is not None:
        draw(document, args.png)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    show = print_markdown if args.markdown else print_rows
    if args.table in ("accuracy", "both"):
        show(*accuracy_table(document))
    if args.table == "both":
        print()
    if args.table in ("selection", "both"):
        show(*selection_table(document))
    if args.table == "summary":
        show(*summary_table(document))
    if args.table == "tasks" or (args.table == "both" and document.get("task_rows")):
        if args.table == "both":
            print()
        show(*task_table(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
