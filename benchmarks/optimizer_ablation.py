"""Lion against AdamATan2 on 6x6 Sudoku at equal steps: held-out exact accuracy and wall time.

Usage:
  python benchmarks/optimizer_ablation.py [--steps 500] [--seeds 0,1,2] [--out DIR]
      [--json FILE]
  python benchmarks/optimizer_ablation.py --from-json FILE   (the markdown table of a document)

The quickstart spec (the paper's MLP TRM) with ``data.generate.size=6`` (the generator's
default 14 clues) trains ``--steps`` optimizer steps (the whole learning-rate schedule) once
per optimizer and seed, each run a fresh ``python -m trm run`` process. The runs alternate
(AdamATan2 seed 0, Lion seed 0, AdamATan2 seed 1, ...) so both see the same machine load.
A seed fixes the generated puzzles, the initial weights and the sampling order, so the two
optimizers of one seed train on the same data from the same start.

AdamATan2 runs with the spec's settings (lr 1e-3, weight decay 0.1, betas 0.9/0.95). Lion
follows the lion-pytorch package's advice relative to those AdamW-type settings: a learning
rate 3x smaller and a weight decay 3x larger (the low end of its 3-10x; its author found 3x
better than 10x on his runs), and the package's default betas (0.9, 0.99).

Reported per run: the final held-out exact and cell accuracy (summary.json's
``final_exact_accuracy``, the last evaluation on the 500 held-out test puzzles) and the
process wall time; per optimizer the mean over seeds. The document carries the provenance()
block and the load average before and after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provenance import load, provenance

BASE = ["data.generate.size=6", "data.generate.clues=0"]
ADAM_LR, ADAM_WEIGHT_DECAY = 1e-3, 0.1  # the quickstart spec's
LION_LR_DIVISOR, LION_WEIGHT_DECAY_FACTOR = 3, 3
OPTIMIZERS: dict[str, list[str]] = {
    "adam_atan2": ["train.optimizer=adam_atan2"],
    "lion": [
        "train.optimizer=lion",
        f"train.lr={ADAM_LR / LION_LR_DIVISOR:.6g}",
        f"train.weight_decay={ADAM_WEIGHT_DECAY * LION_WEIGHT_DECAY_FACTOR:.6g}",
        "train.beta1=0.9",
        "train.beta2=0.99",
    ],
}


def run_one(out: Path, optimizer: str, seed: int, steps: int) -> dict[str, Any]:
    """One ``trm run`` of ``optimizer`` at ``seed``; its log sits next to its run directory."""
    run_dir = out / f"{optimizer}-seed{seed}"
    sets = [*BASE, *OPTIMIZERS[optimizer], f"train.seed={seed}", f"train.max_steps={steps}"]
    sets.append(f"train.eval_interval={max(1, steps // 5)}")
    command = [sys.executable, "-m", "trm", "run", "quickstart", "--out", str(run_dir)]
    command += ["--resume", "never", "--replace"]
    for text in sets:
        command += ["--set", text]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    before = load()
    started = time.perf_counter()
    with run_dir.with_name(run_dir.name + ".log").open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=log, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"optimizer_ablation: {optimizer} seed {seed} failed; see its log")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "optimizer": optimizer,
        "seed": seed,
        "sets": sets,
        "steps": summary["steps"],
        "final_exact_accuracy": summary["final_exact_accuracy"],
        "best_exact_accuracy": summary["best_exact_accuracy"],
        "final_cell_accuracy": final_cell_accuracy(run_dir),
        "train_wall_s": summary["wall_s"],
        "process_wall_s": round(wall_s, 1),
        "load_before": before,
        "load_after": load(),
    }


def final_cell_accuracy(run_dir: Path) -> float | None:
    """The last evaluation's held-out cell accuracy from metrics.jsonl."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in rows if row.get("kind") == "eval"]
    return evals[-1].get("cell_accuracy") if evals else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per optimizer: the mean and spread of the final exact accuracy and the wall time."""
    out: dict[str, dict[str, float]] = {}
    for name in OPTIMIZERS:
        mine = [run for run in runs if run["optimizer"] == name]
        exact = [run["final_exact_accuracy"] for run in mine]
        out[name] = {
            "runs": len(mine),
            "final_exact_accuracy_mean": statistics.fmean(exact),
            "final_exact_accuracy_min": min(exact),
            "final_exact_accuracy_max": max(exact),
            "train_wall_s_mean": statistics.fmean(run["train_wall_s"] for run in mine),
            "process_wall_s_mean": statistics.fmean(run["process_wall_s"] for run in mine),
        }
    return out


def markdown_table(document: dict[str, Any]) -> str:
    """Per optimizer: its settings, each seed's final held-out exact accuracy and wall time,
    and the means."""
    seeds = sorted({run["seed"] for run in document["runs"]})
    head = ["optimizer", "lr, weight decay, betas"]
    head += [f"seed {seed}: exact, wall s" for seed in seeds]
    head += ["mean exact", "mean wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, summary in document["summary"].items():
        mine = {run["seed"]: run for run in document["runs"] if run["optimizer"] == name}
        sets = dict(text.split("=", 1) for text in mine[seeds[0]]["sets"])
        settings = (
            f"{sets.get('train.lr', '1e-3')}, {sets.get('train.weight_decay', '0.1')}, "
            f"({sets.get('train.beta1', '0.9')}, {sets.get('train.beta2', '0.95')})"
        )
        cells = [name, settings]
        cells += [
            f"{mine[seed]['final_exact_accuracy']:.1%}, {mine[seed]['process_wall_s']:.0f}"
            for seed in seeds
        ]
        cells += [
            f"{summary['final_exact_accuracy_mean']:.1%}",
            f"{summary['process_wall_s_mean']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", type=Path, default=Path("runs/optimizer-ablation"))
    parser.add_argument("--json", type=Path, help="write the document here (else stdout)")
    parser.add_argument("--from-json", type=Path, help="print the table of a saved document")
    args = parser.parse_args(argv)
    if args.from_json:
        print(markdown_table(json.loads(args.from_json.read_text())))
        return 0
    document: dict[str, Any] = {"provenance": provenance()}
    document["settings"] = {
        "spec": "quickstart",
        "sets": BASE,
        "steps": args.steps,
        "optimizers": OPTIMIZERS,
        "lion_advice": "lion-pytorch README: lr 3-10x smaller than AdamW's, decoupled weight "
        "decay 3-10x larger; default betas (0.9, 0.99)",
        "nice": os.nice(0),
    }
    runs: list[dict[str, Any]] = []
    for seed in (int(text) for text in args.seeds.split(",")):
        for name in OPTIMIZERS:  # alternating: A B per seed
            run = run_one(args.out, name, seed, args.steps)
            print(
                f"{name} seed {seed}: exact {run['final_exact_accuracy']:.4f} "
                f"in {run['process_wall_s']} s",
                file=sys.stderr,
                flush=True,
            )
            runs.append(run)
    document["runs"] = runs
    document["summary"] = summarize(runs)
    text = json.dumps(document, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
