"""Data parallel on this machine: 1 process x N threads against N processes x 1 thread.

Usage: python benchmarks/distributed.py [--spec sudoku-extreme-mlp] [--batch 8] [--steps 4]
[--warmup 1] [--procs 2] [--repeat 1] [--skip-ddp] [--json] [--from-json FILE]

Two measurements, on the spec's model shape (the paper's Sudoku MLP by default) with a small
9x9 Sudoku dataset built into a temporary folder (64 puzzles: the shape of the network is the
paper's, the puzzle-embedding table is small) and a small global batch so it runs in minutes:

1. training speed: ``trm run`` as one process with ``--procs`` threads, then under
   ``torchrun --nproc-per-node PROCS`` with one thread per process; samples/s of the measured
   steps (after ``--warmup``), and for torchrun the seconds per step spent in collectives
   (``collective_s`` in metrics.jsonl: the step's gradient all-reduce, puzzle-embedding
   gather and metrics sums, waits for the slower rank included);
2. the gradient exchange: training steps under torchrun alternating, step by step, between
   trm's explicit all-reduce (one flattened all-reduce after the backward) and torch's
   DistributedDataParallel (``broadcast_buffers=False``; buckets all-reduced during the
   backward) on the same model, so both meet the same load; a step's time is its slowest
   rank's (``--skip-ddp`` leaves this out).

``--repeat R`` measures every variant R times, alternating them, so a machine whose load
changes weighs on all of them alike. Prints a table, or one JSON document with --json;
--from-json prints the table of a saved document. Wall-clock figures: run it on a quiet
machine, or say how busy it was (the document records the load average).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import provenance


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_data(folder: Path) -> Path:
    """A small 9x9 Sudoku dataset (64 train, 16 test puzzles)."""
    out = folder / "data"
    command = [sys.executable, "-m", "trm", "data", "build", "sudoku", "--size", "9"]
    command += ["--count", "64", "--test-count", "16", "--workers", "1", "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return out


def torchrun(procs: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs)]


def train_run(
    args: argparse.Namespace, data: Path, out: Path, procs: int, threads: int
) -> dict[str, Any]:
    """One ``trm run`` (under torchrun when ``procs`` > 1); samples/s and collective time
    of its measured steps."""
    command = torchrun(procs) if procs > 1 else [sys.executable]
    command += ["-m", "trm", "run", args.spec, "--out", str(out), "--resume", "never"]
    command += ["--max-steps", str(args.warmup + args.steps), "--checkpoint-every", "1000000"]
    for setting in (
        f"data.dir={data}",
        f"train.global_batch_size={args.batch}",
        "train.eval_interval=0",
        f"runtime.threads={threads}",
    ):
        command += ["--set", setting]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"benchmark run with {procs} process(es) failed")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "kind" not in r][args.warmup :]
    step_s = [args.batch / r["samples_per_s"] for r in steps]
    collective = [r["collective_s"] for r in steps if "collective_s" in r]
    summary = json.loads((out / "summary.json").read_text())
    return {
        "layout": f"{procs} process(es) x {threads} thread(s)",
        "processes": procs,
        "threads": threads,
        "precision": summary.get("precision"),
        "global_batch": args.batch,
        "measured_steps": len(step_s),
        "step_s": statistics.mean(step_s),
        "samples_per_s": args.batch / statistics.mean(step_s),
        "collective_s_per_step": statistics.mean(collective) if collective else None,
        "collective_share": statistics.mean(collective) / statistics.mean(step_s)
        if collective
        else None,
        "command_wall_s": round(wall_s, 1),
    }


def exchange_run(args: argparse.Namespace, data: Path) -> list[dict[str, Any]]:
    """The gradient-exchange comparison under torchrun (this script as the worker)."""
    command = [*torchrun(args.procs), __file__, "--worker", "--data", str(data)]
    command += ["--spec", args.spec, "--batch", str(args.batch), "--steps", str(args.steps)]
    command += ["--warmup", str(args.warmup)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit("gradient exchange run failed")
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    return json.loads(lines[-1])


def worker(args: argparse.Namespace) -> None:
    """One rank of the gradient-exchange comparison: training steps of the spec's model on
    this rank's rows, alternating step by step between DDP (buckets all-reduced during the
    backward) and trm's explicit all-reduce after it (the same DDP-wrapped model under
    ``no_sync``), so both see the same load; ``--warmup`` + ``--steps`` steps of each."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from trm.data.puzzle_dataset import open_split
    from trm.data.sampler import SplitIndex, TrainSampler
    from trm.data.shape import read_shape
    from trm.device import distributed
    from trm.device.contract import host_placement
    from trm.loop.data_parallel import DataParallel
    from trm.loop.step import accumulate_gradients
    from trm.model import build_model, build_optimizers
    from trm.spec import load_spec, resolve_spec_path

    torch.set_num_threads(1)
    world = distributed.start()
    spec = load_spec(resolve_spec_path(args.spec))
    shape = read_shape(Path(args.data))
    torch.manual_seed(0)
    model = build_model(spec.arch, shape)
    optimizers = build_optimizers(model, spec.train)
    parallel = DataParallel(world, args.batch)
    parallel.attach(optimizers)
    ddp = DistributedDataParallel(model, broadcast_buffers=False)
    index = SplitIndex(open_split(Path(args.data) / "train"))
    sampler = TrainSampler(index, args.batch, spec.train.seed)
    times: dict[str, list[float]] = {"ddp": [], "allreduce": []}
    collectives: dict[str, list[float]] = {"ddp": [], "allreduce": []}
    for step in range(2 * (args.warmup + args.steps)):
        mode = "ddp" if step % 2 == 0 else "allreduce"
        rows = index.gather(sampler.examples_for_step(step)[parallel.rows])
        batch = host_placement().to_device(rows)
        carry = model.initial_carry(batch)
        min_halt = model.draw_min_halt_steps(args.batch, "cpu")[parallel.rows]
        distributed.barrier()
        started, before = time.perf_counter(), distributed.collective_seconds()
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        with ddp.no_sync() if mode == "allreduce" else contextlib.nullcontext():
            _, sums = accumulate_gradients(
                ddp,
                carry,
                batch,
                min_halt_steps=min_halt,
                micro_batch_size=parallel.local_batch,
                loss=spec.arch.loss,
                divisor=args.batch,
                placement=host_placement(),
            )
        if mode == "allreduce":
            parallel.reduce_step(model, sums)
        for opt in optimizers:
            opt.step()
        if step >= 2 * args.warmup:
            times[mode].append(time.perf_counter() - started)
            collectives[mode].append(distributed.collective_seconds() - before)
    everyone = distributed.gather_objects(times)
    if world.is_first:
        reports = []
        for mode, name in (("allreduce", "explicit all-reduce"), ("ddp", "DDP")):
            reports.append(
                {
                    "exchange": name,
                    "processes": world.size,
                    "measured_steps": len(times[mode]),
                    # a step lasts as long as its slowest rank's
                    "step_s": statistics.mean(
                        max(rank[mode][i] for rank in everyone) for i in range(len(times[mode]))
                    ),
                    "trm_collective_s_per_step": statistics.mean(collectives[mode]),
                }
            )
        print(json.dumps(reports), flush=True)
    distributed.finish()


TRAIN_COLUMNS = (
    ("layout", "layout", "{}"),
    ("precision", "precision", "{}"),
    ("global batch", "global_batch", "{}"),
    ("steps", "measured_steps", "{}"),
    ("s/step", "step_s", "{:.2f}"),
    ("samples/s", "samples_per_s", "{:.3f}"),
    ("collectives s/step", "collective_s_per_step", "{:.4f}"),
    ("share", "collective_share", "{:.1%}"),
)
EXCHANGE_COLUMNS = (
    ("gradient exchange", "exchange", "{}"),
    ("processes", "processes", "{}"),
    ("steps", "measured_steps", "{}"),
    ("s/step", "step_s", "{:.3f}"),
    ("trm collectives s/step", "trm_collective_s_per_step", "{:.4f}"),
)


def table(rows: list[dict[str, Any]], columns: tuple) -> str:
    """A markdown table of ``rows``."""
    lines = ["| " + " | ".join(title for title, _, _ in columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        cells = [
            "-" if row.get(key) is None else pattern.format(row[key]) for _, key, pattern in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_tables(document: dict[str, Any]) -> None:
    print(f"CPU: {document['cpu']} ({document['logical_cpus']} logical CPUs)")
    print(table(document["training"], TRAIN_COLUMNS))
    if document.get("exchange"):
        print()
        print(table(document["exchange"], EXCHANGE_COLUMNS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="sudoku-extreme-mlp")
    parser.add_argument("--batch", type=int, default=8, help="global batch of every run")
    parser.add_argument("--steps", type=int, default=4, help="measured steps")
    parser.add_argument("--warmup", type=int, default=1, help="steps left out of the figures")
    parser.add_argument("--procs", type=int, default=2, help="processes (and threads of one)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every variant")
    parser.add_argument("--skip-ddp", action="store_true", help="no gradient-exchange runs")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--from-json", metavar="FILE", help="table of a saved --json document")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as saved:
            print_tables(json.load(saved))
        return
    with tempfile.TemporaryDirectory(prefix="trm-dist-bench-") as tmp:
        folder = Path(tmp)
        print("building a 9x9 Sudoku dataset …", file=sys.stderr)
        data = build_data(folder)
        training, exchange = [], []
        for attempt in range(args.repeat):
            for procs, threads in ((1, args.procs), (args.procs, 1)):
                print(f"training: {procs} process(es) x {threads} thread(s) …", file=sys.stderr)
                out = folder / f"run-{procs}x{threads}-{attempt}"
                training.append(train_run(args, data, out, procs, threads))
            if not args.skip_ddp:
                print("gradient exchange: DDP and explicit, step by step …", file=sys.stderr)
                exchange.extend(exchange_run(args, data))
    document = {
        "cpu": cpu_name(),
        "logical_cpus": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "spec": args.spec,
        "training": training,
        "exchange": exchange,
        "provenance": provenance(),
    }
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_tables(document)


if __name__ == "__main__":
    main()
