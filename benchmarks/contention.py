"""The quickstart's time alone and beside one busy single-thread process, with the threads
trm chooses and with fixed counts.

    python benchmarks/contention.py [--steps 150] [--rounds 2] [--json] [--out FILE]
    python benchmarks/contention.py --table FILE    # the markdown table of a result

Each row is ``trm run quickstart --max-steps N`` in its own process and run directory (its
data built there, as a user's first run does), timed from start to exit (``command_s``) and
by its summary.json (``train_s``, the loop's wall time). Configurations:

- ``chosen``: the threads trm chooses (``runtime.threads`` 0), following the machine;
- ``fixed-1``, ``fixed-2``, ...: ``--set runtime.threads=N`` for N up to this process's CPUs.
  ``fixed-K`` with K the usable cores is what trm chose before it counted busy cores (one
  thread per usable physical core, whatever else ran): the "before" of a change to the
  choice;
- ``main`` (with ``--before-python PY``): that interpreter's trm (another checkout's venv),
  threads as it chooses.

``busy`` rows run beside one ``python -c "while True: pass"`` started a second before.
Rounds alternate the order of the rows (the second round runs them backwards), and each row
records ``uptime``'s load averages before and after it: other work on a shared machine shows
there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import provenance

BUSY_LOOP = "while True: pass"
BUSY_HEAD_START_S = 1.0


def uptime() -> str:
    """``uptime``'s line (the load averages), or os.getloadavg() where it is missing."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run_row(config: str, busy: bool, steps: int, python: str, work: Path) -> dict:
    """One ``trm run quickstart`` with ``config``, beside a busy process when ``busy``."""
    out = work / f"{config}-{'busy' if busy else 'alone'}-{time.monotonic_ns()}"
    command = [python, "-m", "trm", "run", "quickstart", "--max-steps", str(steps)]
    command += ["--out", str(out)]
    if config.startswith("fixed-"):
        command += ["--set", f"runtime.threads={config.removeprefix('fixed-')}"]
    hog = None
    if busy:
        hog = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
        time.sleep(BUSY_HEAD_START_S)
    load_before = uptime()
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=work)
    finally:
        seconds = time.perf_counter() - started
        if hog is not None:
            hog.kill()
            hog.wait()
    row = {
        "config": config,
        "busy": busy,
        "command": " ".join(command[1:]),
        "python": python,
        "exit_code": done.returncode,
        "command_s": round(seconds, 1),
        "uptime_before": load_before,
        "uptime_after": uptime(),
    }
    summary = out / "summary.json"
    if summary.exists():
        row["train_s"] = json.loads(summary.read_text())["wall_s"]
    row["threads_line"] = next(
        (line for line in done.stderr.splitlines() if "training quickstart on" in line), None
    )
    row["thread_changes"] = [
        line.removeprefix("trm: ") for line in done.stderr.splitlines() if ": threads " in line
    ]
    if done.returncode != 0:
        row["error"] = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
    return row


def one_minute_load(line: str) -> str:
    return line.split("load average:")[-1].split(",")[0].strip()


def table(document: dict) -> str:
    """A markdown table of a result: one line per load and configuration, each round's
    command and training seconds, the threads line and the 1-minute loads seen."""
    rounds = sorted({r["round"] for r in document["rows"]})
    head = ["beside", "threads", *(f"round {n}: run s (train s)" for n in rounds)]
    lines = ["| " + " | ".join([*head, "1-min load before each"]) + " |"]
    lines.append("|" + "---|" * (len(head) + 1))
    keys = dict.fromkeys((r["busy"], r["config"]) for r in document["rows"])
    for busy, config in keys:
        rows = [r for r in document["rows"] if (r["busy"], r["config"]) == (busy, config)]
        cells = []
        for n in rounds:
            row = next((r for r in rows if r["round"] == n), None)
            cells.append(
                "-" if row is None else f"{row['command_s']:.0f} ({row.get('train_s', 0):.0f})"
            )
        loads = ", ".join(one_minute_load(r["uptime_before"]) for r in rows)
        name = "chosen by trm" if config == "chosen" else config.replace("fixed-", "fixed ")
        beside = "one busy process" if busy else "nothing of its own"
        lines.append(f"| {beside} | {name} | " + " | ".join(cells) + f" | {loads} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fixed", default="", help="thread counts to fix, e.g. 1,2 (default: all)")
    parser.add_argument("--before-python", help="an interpreter with the trm to compare against")
    parser.add_argument("--out", type=Path, help="write the JSON document here")
    parser.add_argument("--json", action="store_true", help="print the JSON document")
    parser.add_argument("--table", type=Path, help="print the markdown table of this result")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    from trm.hardware import allowed_cpu_count

    cpus = allowed_cpu_count()
    fixed = [int(n) for n in args.fixed.split(",") if n] or list(range(1, cpus + 1))
    configs = [(c, sys.executable) for c in ["chosen", *(f"fixed-{n}" for n in fixed)]]
    if args.before_python:
        configs.append(("main", args.before_python))
    order = [(c, py, busy) for busy in (False, True) for c, py in configs]
    started = provenance()  # at the start: the commit, the machine, the date, the load
    rows = []
    with tempfile.TemporaryDirectory(prefix="trm-contention-") as tmp:
        for number in range(args.rounds):
            for config, python, busy in order if number % 2 == 0 else order[::-1]:
                row = run_row(config, busy, args.steps, python, Path(tmp))
                row["round"] = number + 1
                rows.append(row)
                print(
                    f"round {number + 1} {config:>8} {'busy' if busy else 'alone':>5} "
                    f"{row['command_s']:7.1f} s  train {row.get('train_s', '-')} s  "
                    f"[{row['uptime_before'].split('load average:')[-1].strip()}]",
                    file=sys.stderr,
                )
    document = {
        "provenance": started,
        "what": "trm run quickstart alone and beside one busy single-thread process",
        "cpus": cpus,
        "rows": rows,
    }
    text = json.dumps(document, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
