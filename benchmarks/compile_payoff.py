"""What compiling a small network costs and saves on this machine: the figures behind the
priors of trm.device.compile_payoff (PRIOR_SAVING, PRIOR_COMPILE_S).

Usage: python benchmarks/compile_payoff.py [--specs quickstart,sudoku9-laptop] [--batch 128]
[--rounds 2] [--steps 20] [--warmup 3] [--threads 0] [--out FILE]
       python benchmarks/compile_payoff.py --from FILE [--by-round] [--markdown]

Per spec and round, three fresh ``trm bench`` processes in turn (A B C A B C): eager
(``runtime.compile=off``), compiled with a cold cache (torch's on-disk compile caches in a new
empty folder) and compiled again with that folder warm. Each reports its median step seconds
and, compiled, the seconds compiling added to its warm-up steps (``compile_s``) and what the
cache answered. The summary per spec: the share of an eager step compiling saves (median over
rounds), the cold and warm compile seconds, and the steps after which compiling has paid for
itself (compile s / (eager s - compiled s)). No process reads or writes the user's compile
ledger (``TRM_COMPILE_LEDGER=off``). The load (``uptime``) is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # provenance, tables

from provenance import load, provenance
from tables import print_rows

VARIANTS = ("eager", "compiled, cold cache", "compiled, warm cache")
HEADERS = (
    "spec",
    "batch",
    "eager s/step",
    "compiled s/step",
    "saving",
    "compile s (cold)",
    "compile s (warm)",
    "pays after (cold)",
    "pays after (warm)",
)


def bench(spec: str, compiled: bool, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One ``trm bench`` process; its document's figures, or the error it printed."""
    cmd = [
        sys.executable, "-m", "trm", "bench", spec, "--json", "--no-plain",
        "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--peak-seconds", "0.2", "--set", f"runtime.compile={'on' if compiled else 'off'}",
        "--set", f"runtime.threads={args.threads}",
    ]  # fmt: skip
    env = {**os.environ, "TRM_COMPILE_LEDGER": "off", "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-400:]}
    document = json.loads(done.stdout)
    return {
        "step_s_median": statistics.median(document["step_s"]),
        "step_s": document["step_s"],
        "warmup_s": document["warmup_s"],
        "compile_s": document["compile_s"],
        "compile_cache": document["compile_cache"],
        "threads": document["threads"],
        "precision": document["precision"],
    }


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over rounds of each variant, the saving and the break-even steps."""

    def median(variant: str, field: str) -> float | None:
        values = [r[field] for r in runs[variant] if r.get(field) is not None]
        return statistics.median(values) if values else None

    eager = median("eager", "step_s_median")
    compiled = median("compiled, warm cache", "step_s_median")
    cold = median("compiled, cold cache", "compile_s")
    warm = median("compiled, warm cache", "compile_s")
    summary: dict[str, Any] = {
        "eager_step_s": eager,
        "compiled_step_s": compiled,
        "compile_s_cold": cold,
        "compile_s_warm": warm,
    }
    if eager and compiled:
        saved = eager - compiled
        summary["saving"] = saved / eager
        summary["pays_after_steps_cold"] = cold / saved if saved > 0 and cold else None
        summary["pays_after_steps_warm"] = warm / saved if saved > 0 and warm else None
    return summary


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    def fmt(value: Any, pattern: str) -> str:
        return "-" if value is None else pattern.format(value)

    rows = []
    for spec in document["specs"]:
        s = spec["summary"]
        rows.append(
            [
                spec["spec"],
                str(document["batch"]),
                fmt(s.get("eager_step_s"), "{:.3f}"),
                fmt(s.get("compiled_step_s"), "{:.3f}"),
                fmt(s.get("saving"), "{:.0%}"),
                fmt(s.get("compile_s_cold"), "{:.1f}"),
                fmt(s.get("compile_s_warm"), "{:.1f}"),
                fmt(s.get("pays_after_steps_cold"), "{:.0f}"),
                fmt(s.get("pays_after_steps_warm"), "{:.0f}"),
            ]
        )
    return rows


ROUND_HEADERS = (
    "spec",
    "round",
    "eager s/step",
    "compiled s/step (cold run)",
    "compiled s/step (warm run)",
    "compile s (cold)",
    "compile s (warm)",
)


def round_rows(document: dict[str, Any]) -> list[list[str]]:
    """One row a spec and round: each variant's median step and the compile seconds."""

    def fmt(run: dict[str, Any], field: str, pattern: str) -> str:
        value = run.get(field)
        return "-" if value is None else pattern.format(value)

    rows = []
    for spec in document["specs"]:
        runs = spec["runs"]
        for index, eager in enumerate(runs["eager"]):
            cold = runs["compiled, cold cache"][index]
            warm = runs["compiled, warm cache"][index]
            rows.append(
                [
                    spec["spec"],
                    str(index + 1),
                    fmt(eager, "step_s_median", "{:.3f}"),
                    fmt(cold, "step_s_median", "{:.3f}"),
                    fmt(warm, "step_s_median", "{:.3f}"),
                    fmt(cold, "compile_s", "{:.1f}"),
                    fmt(warm, "compile_s", "{:.1f}"),
                ]
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default="quickstart,sudoku9-laptop")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: trm's choice")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--from", dest="from_file", type=Path, help="print a saved document")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--by-round", action="store_true", help="with --from: each round")
    args = parser.parse_args(argv)
    if args.from_file:
        document = json.loads(args.from_file.read_text())
        if args.by_round:
            print_rows(ROUND_HEADERS, round_rows(document), markdown=args.markdown)
        else:
            print_rows(HEADERS, table_rows(document), markdown=args.markdown)
        return 0
    document: dict[str, Any] = {
        "kind": "trm-compile-payoff",
        "provenance": provenance(),
        "batch": args.batch,
        "rounds": args.rounds,
        "steps": args.steps,
        "warmup": args.warmup,
        "load_before": load(),
        "order": [],
        "specs": [],
    }
    for spec in [s for s in args.specs.split(",") if s]:
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
        for round_ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="trm-inductor-") as folder:
                cache = Path(folder)
                for variant in VARIANTS:
                    print(f"{spec}: round {round_ + 1}, {variant}", file=sys.stderr, flush=True)
                    runs[variant].append(bench(spec, variant != "eager", cache, args))
                    document["order"].append(f"{spec}: {variant}")
        document["specs"].append({"spec": spec, "runs": runs, "summary": summarise(runs)})
        if args.out:
            args.out.write_text(json.dumps(document, indent=2) + "\n")
    document["load_after"] = load()
    if args.out:
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    print_rows(HEADERS, table_rows(document), markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
