"""Time to accuracy, side by side: ``trm run`` against the official TinyRecursiveModels model
trained with its own step, on the same data, seed and global batch, on this machine.

Usage: python benchmarks/time_to_accuracy.py --reference PATH [--tasks quickstart,sudoku9]
[--cap-s 720] [--threads N] [--sequential | --jobs N] [--held-out TASK=DIR]
[--variant NAME:KEY=VALUE,...] [--set KEY=VALUE] [--threshold TASK=FRACTION] [--json]
[--out FILE] [--from-json FILE]

Tasks: ``quickstart`` (4x4 Sudoku, threshold 95% held-out exact accuracy) and ``sudoku9``
(spec sudoku9-laptop, 9x9 at 25–30 clues, threshold 80%). For each, the wall time from the
start of training until the held-out exact accuracy first reaches the threshold, each side
stopped at ``--cap-s`` (then the best accuracy reached is the figure).

- trm: ``trm run SPEC`` as shipped (its plugins, compile and precision choices; the 9x9
  spec's staged curriculum), ``train.time_budget_s = 0`` so the step count is the spec's
  ``max_steps`` on both sides, evaluations every ``eval_interval`` steps on
  ``eval_max_examples`` held-out puzzles. Time: the run's ``wall_s`` at the evaluated step
  (metrics.jsonl), which counts compilation and earlier evaluations. Both sides read the one
  data set trm's source builds for the spec (``data.dir``), built before any clock starts.
- official: its model, ACT loss head, optimizers (AdamW for AdamATan2; its sign-SGD
  puzzle-embedding optimizer), cosine schedule with warm-up over the same ``max_steps``,
  EMA (its EMAHelper) and ``torch.compile``, stepped as pretrain.py steps them
  (``benchmarks/peer_steps.py``), on the data set trm builds for the spec (the reference's
  format), batches in trm's sampling order; evaluated as pretrain.py evaluates: on an EMA
  copy (``ema_copy``), in eval mode (every puzzle runs ``halt_max_steps`` supervision steps),
  exact accuracy from its loss head's ``exact_accuracy`` / ``count``, at the same steps on
  the same held-out puzzles. Time: wall seconds since its first step, compilation and
  earlier evaluations counted.

``--held-out TASK=DIR`` scores the task on the held-out split of another data set of the same
shape (for ``sudoku9``, fresh 30-clue puzzles: ``trm data build sudoku --size 9 --count 1
--test-count 1000 --clues 30 --augment 0 --seed 1 --out DIR``) in place of the spec's own
held-out mix; both sides train on the spec's data and score on the same puzzles.

``--variant NAME:KEY=VALUE,KEY=VALUE`` adds a trm side ``trm+NAME`` that runs the spec with
those ``--set`` overrides as well (a lever such as ``muon:train.optimizer=muon``), beside the
plain ``trm`` side and the official one, on the same data. ``--set KEY=VALUE`` changes the spec
for every side (e.g. ``train.max_steps``, ``train.eval_interval``: the official side reads the
same values). ``--threshold TASK=FRACTION`` replaces the task's threshold; every side's summary
also gives its time to each of :data:`MILESTONES`.

By default every side of every task runs at once (one process each) so that all share the
machine's load alike (a shared CPU: ``uptime`` is recorded before and after);
``--sequential`` runs them one after the other and ``--jobs N`` at most N at a time, in the
order official, trm, then the variants (so the official side and plain trm run together).
``--official official-fp32`` runs the official code with its own ``arch.forward_dtype =
float32`` in place of (or, ``official,official-fp32``, beside) the code as it ships in bf16.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tables, provenance, peer_steps

from provenance import load, provenance
from tables import print_rows, print_saved

from trm.errors import TrmError

TASKS = {
    "quickstart": {"spec": "quickstart", "threshold": 0.95},
    "sudoku9": {"spec": "sudoku9-laptop", "threshold": 0.80},
}
# The official sides --official may name: the code as it ships (bf16), and with its own
# arch.forward_dtype = float32 (a CPU without native bf16 emulates bf16 many times slower).
OFFICIAL_SIDES = {"official": None, "official-fp32": "float32"}
TRM_SETS = ("train.time_budget_s=0",)
MILESTONES = (0.5, 0.8, 0.9, 0.95, 0.97)
STARTUP_S = 20.0  # trm's process: imports and setup before its training clock starts


def first_reaching(curve: list[dict[str, Any]], threshold: float) -> dict[str, Any] | None:
    """The first point of ``curve`` whose exact accuracy is at least ``threshold``."""
    return next((p for p in curve if p["exact_accuracy"] >= threshold), None)


# ---------------------------------------------------------------------------- trm's side


def build_data(task: str, work: Path) -> Path:
    """The task's data set, built once by trm's source for both sides (the reference's
    format), before any clock starts."""
    from trm.plan.dataset import ensure_dataset
    from trm.plugin_manager import load_plugins
    from trm.spec import load_spec, resolve_spec_path

    spec = load_spec(resolve_spec_path(TASKS[task]["spec"]))
    return ensure_dataset(load_plugins([]), spec, work / f"data-{task}", lambda line: None)


def with_held_out(task: str, data_dir: Path, held_out: Path, work: Path) -> Path:
    """A data set that trains on ``data_dir``'s train split and scores on ``held_out``'s
    held-out split (links, nothing copied); TrmError when the two differ in shape."""
    from trm.spec import load_spec, resolve_spec_path

    data = load_spec(resolve_spec_path(TASKS[task]["spec"])).data
    ours, theirs = data_dir / data.eval_split, held_out / data.eval_split
    if not (theirs / "dataset.json").is_file():
        raise TrmError(f"--held-out {task}={held_out}: no {data.eval_split} split there")
    keys = ("seq_len", "vocab_size")
    try:
        a, b = (json.loads((d / "dataset.json").read_text()) for d in (ours, theirs))
    except (OSError, ValueError) as exc:
        raise TrmError(f"--held-out {task}={held_out}: unreadable dataset.json ({exc})") from None
    if [a.get(k) for k in keys] != [b.get(k) for k in keys]:
        raise TrmError(
            f"--held-out {task}={held_out}: its puzzles are not {task}'s shape "
            f"({', '.join(f'{k} {b.get(k)} against {a.get(k)}' for k in keys)})"
        )
    scored = work / f"data-{task}-held-out"
    scored.mkdir()
    for entry in data_dir.iterdir():
        if entry.name != data.eval_split:
            (scored / entry.name).symlink_to(entry.resolve())
    (scored / data.eval_split).symlink_to(theirs.resolve())
    return scored


def trm_side(
    task: str,
    cap_s: float,
    work: Path,
    data_dir: Path,
    threads: int = 0,
    sets: tuple[str, ...] = (),
    side: str = "trm",
) -> dict[str, Any]:
    """``trm run`` of the task's spec on ``data_dir`` with ``sets`` (``KEY=VALUE`` overrides)
    on top of :data:`TRM_SETS`, stopped (SIGINT) once ``cap_s`` of its process have passed
    (plus :data:`STARTUP_S` for starting Python); its curve, under the name ``side``."""
    spec = TASKS[task]["spec"]
    run_dir = work / f"{side}-{task}"
    command = [sys.executable, "-m", "trm", "run", spec, "--out", str(run_dir)]
    command += ["--resume", "never", "--replace"]
    every = [*TRM_SETS, f"data.dir={data_dir}", *sets]
    every += [f"runtime.threads={threads}"] if threads else []
    for item in every:
        command += ["--set", item]
    log = (work / f"{side}-{task}.log").open("w")
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        process.wait(timeout=cap_s + STARTUP_S)
        capped = False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # trm stops at the step's end and writes its summary
        capped = True
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log.close()
    rows = []
    path = run_dir / "metrics.jsonl"
    if path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    wall_at = {r["step"]: r["wall_s"] for r in rows if "kind" not in r and "wall_s" in r}
    curve = [
        {
            "step": r["step"],
            "wall_s": wall_at.get(r["step"]),
            "exact_accuracy": r["exact_accuracy"],
        }
        for r in rows
        if r.get("kind") == "eval" and "exact_accuracy" in r
    ]
    steps = [r["step"] for r in rows if "kind" not in r]
    return {
        "side": side,
        "sets": list(sets),
        "command": subprocess.list2cmdline(command),
        "exit_code": process.returncode,
        "capped": capped,
        "process_wall_s": round(time.perf_counter() - started, 1),
        "steps_done": max(steps, default=0),
        "curve": curve,
    }


# ---------------------------------------------------------------------------- official side


def official_side(
    task: str,
    cap_s: float,
    work: Path,
    reference: Path,
    data_dir: Path,
    threads: int = 0,
    sets: tuple[str, ...] = (),
    forward_dtype: str | None = None,
) -> dict[str, Any]:
    """The official model trained with its step on trm's data for the task, with the spec
    changed by ``sets`` (the ``--set`` values every side shares); its curve. ``forward_dtype``
    ``"float32"`` is the ``official-fp32`` side (its own ``arch.forward_dtype`` setting, as a
    user sets it on a CPU without native bf16), None the code as it ships (bf16)."""
    import numpy as np
    import torch
    from peer_steps import Batches, official_step

    from trm.data.puzzle_dataset import open_split
    from trm.data.sampler import SplitIndex
    from trm.data.shape import read_shape
    from trm.spec import apply_overrides, load_spec, resolve_spec_path

    spec = load_spec(resolve_spec_path(TASKS[task]["spec"]))
    spec = apply_overrides(spec, [*TRM_SETS, *sets])
    train = spec.train
    if threads:
        torch.set_num_threads(threads)
    shape = read_shape(data_dir, spec.data.train_split)
    total = train.max_steps
    batches = Batches(spec, data_dir, train.global_batch_size, "cpu", count=None)
    peer = official_step(reference, spec, shape, batches, "cpu", total, forward_dtype=forward_dtype)
    model, ema = peer.model, peer.ema  # the EMA pretrain.py keeps (updated in peer.step)
    test = SplitIndex(open_split(data_dir / spec.data.eval_split))
    count = test.split.num_examples
    if train.eval_max_examples:
        count = min(count, train.eval_max_examples)
    examples = list(range(count))

    def evaluate() -> float:
        scored = model if ema is None else ema.ema_copy(model)
        scored.eval()
        exact = total_count = 0.0
        with torch.inference_mode():
            for start in range(0, count, train.global_batch_size):
                rows = test.gather(np.asarray(examples[start : start + train.global_batch_size]))
                batch = {k: torch.from_numpy(v) for k, v in rows.items()}
                carry = scored.initial_carry(batch)
                while True:
                    carry, _, metrics, _, finished = scored(
                        carry=carry, batch=batch, return_keys=[]
                    )
                    if finished:
                        break
                exact += float(metrics["exact_accuracy"])
                total_count += float(metrics["count"])
        return exact / max(total_count, 1.0)

    curve: list[dict[str, Any]] = []
    started = time.perf_counter()
    step = 0
    capped = False
    while step < total:
        peer.step()
        step += 1
        wall_s = time.perf_counter() - started
        if wall_s >= cap_s:
            capped = True
        if step % train.eval_interval == 0 or step == total or capped:
            curve.append({"step": step, "wall_s": round(wall_s, 3), "exact_accuracy": evaluate()})
        if capped:
            break
    return {
        "side": "official" if forward_dtype is None else "official-fp32",
        "capped": capped,
        "process_wall_s": round(time.perf_counter() - started, 1),
        "steps_done": step,
        "curve": curve,
        "notes": [
            *peer.notes,
            "batches in trm's sampling order of trm's data set (no curriculum)",
        ],
    }


# ---------------------------------------------------------------------------- the document


def side_summary(side: dict[str, Any], threshold: float) -> dict[str, Any]:
    hit = first_reaching(side["curve"], threshold)
    best = max((p["exact_accuracy"] for p in side["curve"]), default=None)
    reached = {f"{m:g}": first_reaching(side["curve"], m) for m in MILESTONES}
    return {
        "time_to_threshold_s": hit["wall_s"] if hit else None,
        "step_at_threshold": hit["step"] if hit else None,
        "best_exact_accuracy": best,
        "time_to_s": {m: p["wall_s"] if p else None for m, p in reached.items()},
    }


HEADERS = (
    "task",
    "threshold",
    "side",
    "steps done",
    "time to threshold",
    "best exact",
    "to " + " / ".join(f"{m:.0%}" for m in MILESTONES),
    "capped",
)


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    out = []
    for task in document["tasks"]:
        for side in task["sides"]:
            s = side["summary"]
            reached = s["time_to_threshold_s"]
            milestones = [first_reaching(side["curve"], m) for m in MILESTONES]
            out.append(
                [
                    task["task"],
                    f"{task['threshold']:.0%}",
                    side["side"],
                    str(side["steps_done"]),
                    f"{reached:.0f} s (step {s['step_at_threshold']})"
                    if reached is not None
                    else "not reached",
                    "-" if s["best_exact_accuracy"] is None else f"{s['best_exact_accuracy']:.3f}",
                    " / ".join("-" if p is None else f"{p['wall_s']:.0f}" for p in milestones),
                    f"yes, at {document['cap_s']:.0f} s" if side["capped"] else "no",
                ]
            )
    return out


def variant_item(item: str) -> tuple[str, tuple[str, ...]]:
    """``NAME:KEY=VALUE,KEY=VALUE`` of ``--variant``, checked: the side's name and its sets."""
    name, _, sets = item.partition(":")
    pairs = tuple(p for p in sets.split(",") if p)
    if not name.isidentifier() or not pairs or any("=" not in p for p in pairs):
        raise TrmError(
            f"--variant {item}: expected NAME:KEY=VALUE[,KEY=VALUE...] (NAME letters, digits and _)"
        )
    return name, pairs


def threshold_item(item: str, tasks: list[str]) -> tuple[str, float]:
    """``TASK=FRACTION`` of ``--threshold``, checked."""
    task, _, value = item.partition("=")
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if task not in tasks or not 0.0 < fraction <= 1.0:
        raise TrmError(
            f"--threshold {item}: expected TASK=FRACTION with TASK one of {', '.join(tasks)} "
            "and 0 < FRACTION <= 1"
        )
    return task, fraction


def held_out_item(item: str, tasks: list[str]) -> tuple[str, Path]:
    """``TASK=DIR`` of ``--held-out``, checked."""
    task, _, folder = item.partition("=")
    if task not in tasks or not folder:
        raise TrmError(f"--held-out {item}: expected TASK=DIR with TASK one of {', '.join(tasks)}")
    if not Path(folder).is_dir():
        raise TrmError(f"--held-out {item}: {folder} is not a folder")
    return task, Path(folder)


def run_one(args: argparse.Namespace) -> int:
    """A single side of a single task (the child process); its JSON on stdout."""
    work = Path(args.work)
    data_dir = Path(args.data)
    shared = tuple(args.set)
    if args.side in OFFICIAL_SIDES:
        dtype = OFFICIAL_SIDES[args.side]
        result = official_side(
            args.one_task, args.cap_s, work, args.reference, data_dir, args.threads, shared, dtype
        )
    else:
        name, own = args.side, ()
        if args.side != "trm":
            name, own = variant_item(args.side)
            name = f"trm+{name}"
        result = trm_side(
            args.one_task, args.cap_s, work, data_dir, args.threads, (*shared, *own), name
        )
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a TinyRecursiveModels checkout")
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    parser.add_argument("--cap-s", type=float, default=720.0, help="wall seconds per side")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads a side (0: default)")
    parser.add_argument("--sequential", action="store_true", help="one side at a time")
    parser.add_argument(
        "--official",
        default="official",
        help=f"comma-separated official sides: {', '.join(OFFICIAL_SIDES)} (none: '')",
    )
    parser.add_argument("--jobs", type=int, default=0, help="at most N sides at once (0: all)")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="another trm side, trm+NAME, with these --set values",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spec value for every side (the official side too)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="TASK=FRACTION",
        help="replace the task's threshold of held-out exact accuracy",
    )
    parser.add_argument(
        "--held-out",
        action="append",
        default=[],
        metavar="TASK=DIR",
        help="score TASK on DIR's held-out split (same shape, another seed)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--out", type=Path, help="write the JSON document there")
    parser.add_argument("--from-json", type=Path, help="print the table of a saved document")
    parser.add_argument("--markdown", action="store_true", help="the table as markdown")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--one-task", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        tasks = [t for t in args.tasks.split(",") if t]
        unknown = [t for t in tasks if t not in TASKS]
        if unknown:
            raise TrmError(f"--tasks: unknown {', '.join(unknown)}; choose from {', '.join(TASKS)}")
        if args.cap_s <= 0:
            raise TrmError(f"--cap-s must be positive, got {args.cap_s}")
        if not args.from_json and (args.reference is None or not args.reference.is_dir()):
            raise TrmError("--reference PATH must name a TinyRecursiveModels checkout")
        held_out = dict(held_out_item(item, tasks) for item in args.held_out)
        variants = [variant_item(item) for item in args.variant]
        if len({name for name, _ in variants}) < len(variants):
            raise TrmError("--variant: two variants share a name")
        thresholds = {t: TASKS[t]["threshold"] for t in tasks}
        thresholds.update(threshold_item(item, tasks) for item in args.threshold)
        if any("=" not in item for item in args.set):
            raise TrmError("--set: expected KEY=VALUE")
        officials = [o for o in args.official.split(",") if o]
        if any(o not in OFFICIAL_SIDES for o in officials):
            raise TrmError(f"--official {args.official}: choose from {', '.join(OFFICIAL_SIDES)}")
        if args.jobs < 0:
            raise TrmError(f"--jobs must be 0 (all at once) or more, got {args.jobs}")
    except TrmError as exc:
        print(f"trm: error: {exc}", file=sys.stderr)
        return 2
    if args.from_json:
        return print_saved(args.from_json, HEADERS, table_rows, args.markdown)
    if args.side:
        return run_one(args)

    document: dict[str, Any] = {
        "kind": "trm-time-to-accuracy",
        "provenance": provenance(),
        "reference": str(args.reference),
        "cap_s": args.cap_s,
        "concurrent": not args.sequential,
        "threads": args.threads or "default (trm's choice; torch's default for the official)",
        "held_out": {t: str(held_out.get(t, "the spec's own held-out split")) for t in tasks},
        "jobs": 1 if args.sequential else (args.jobs or "all"),
        "shared_sets": list(args.set),
        "variants": {f"trm+{name}": list(sets) for name, sets in variants},
        "tasks": [],
    }
    work = Path(tempfile.mkdtemp(prefix="trm-tta-"))
    try:
        jobs = []
        data = {task: build_data(task, work) for task in tasks}
        try:
            for task, path in held_out.items():
                data[task] = with_held_out(task, data[task], path, work)
        except TrmError as exc:
            print(f"trm: error: {exc}", file=sys.stderr)
            return 2
        document["load_start_training"] = load()
        sides = [*officials, "trm", *args.variant]
        names = [*officials, "trm", *(f"trm+{name}" for name, _ in variants)]
        limit = 1 if args.sequential else (args.jobs or len(tasks) * len(sides))
        started_under: dict[tuple[str, str], dict[str, Any]] = {}
        for task in tasks:
            for side, name in zip(sides, names, strict=True):
                while sum(p.poll() is None for _, _, p, _ in jobs) >= limit:
                    time.sleep(1.0)
                command = [sys.executable, __file__, "--side", side, "--one-task", task]
                command += ["--work", str(work), "--cap-s", str(args.cap_s)]
                command += ["--data", str(data[task]), "--threads", str(args.threads)]
                command += ["--reference", str(args.reference)]
                for item in args.set:
                    command += ["--set", item]
                started_under[task, name] = load()
                err = (work / f"{name}-{task}.err").open("w")
                out = (work / f"{name}-{task}.out").open("w")  # a file: nothing blocks on a pipe
                process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
                jobs.append((task, name, process, err))
                out.close()
        results: dict[tuple[str, str], dict[str, Any]] = {}
        for task, side, process, err in jobs:
            process.wait()
            err.close()
            try:
                lines = (work / f"{side}-{task}.out").read_text().strip().splitlines()
                results[task, side] = json.loads(lines[-1])
            except (IndexError, json.JSONDecodeError):
                tail = (work / f"{side}-{task}.err").read_text().strip().splitlines()[-3:]
                results[task, side] = {
                    "side": side,
                    "failed": tail,
                    "curve": [],
                    "capped": False,
                    "steps_done": 0,
                }
        for task in tasks:
            threshold = thresholds[task]
            done = []
            for name in names:
                result = results[task, name]
                result["summary"] = side_summary(result, threshold)
                result["load_at_start"] = started_under[task, name]
                done.append(result)
            document["tasks"].append(
                {"task": task, "spec": TASKS[task]["spec"], "threshold": threshold, "sides": done}
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    document["load_end"] = load()
    if args.out:
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_rows(HEADERS, table_rows(document), markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
