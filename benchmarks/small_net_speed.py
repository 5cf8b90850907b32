"""Step time of a small network on this CPU: eager fp32, bf16 autocast, compiled fp32 and
compiled bf16, alternated A B C D A B C D in one invocation (each a fresh `trm bench` process).

Usage: python benchmarks/small_net_speed.py --spec sudoku9-laptop [--depths "1,1;1,2;2,3"]
[--rounds 2] [--steps 20] [--warmup 3] [--threads 2] [--batch 128]
[--variants "eager fp32,eager bf16"] [--clock wall|cpu] [--out FILE]

For each depth (H_cycles, L_cycles) and round, runs the four variants in turn and records the
timed seconds per step and the warm-up seconds (wall, or with --clock cpu the process's CPU
seconds) (where compilation happens) of each. Writes one
JSON document with provenance() and the load (`uptime`) before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from provenance import provenance

VARIANTS = (
    ("eager fp32", "fp32", "off"),
    ("eager bf16", "bf16", "off"),
    ("compiled fp32", "fp32", "on"),
    ("compiled bf16", "bf16", "on"),
)


# With --clock cpu the bench's step timer reads the process's CPU seconds (all its threads)
# instead of wall seconds: under other processes' load a one-thread run's CPU seconds per step
# stay close to what the step costs on a quiet machine, where its wall seconds do not.
# Inductor compiles in this process (one compile thread), so compile work is counted too.
CPU_CLOCK_LAUNCHER = (
    "import os, sys, time; os.environ['TORCHINDUCTOR_COMPILE_THREADS'] = '1'; "
    "time.perf_counter = time.process_time; from trm.cli.main import entry; "
    "sys.argv[0] = 'trm'; entry()"
)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def bench_once(spec: str, h: int, lc: int, precision: str, compile_: str, a: Any) -> dict:
    launcher = ["-m", "trm"] if a.clock == "wall" else ["-c", CPU_CLOCK_LAUNCHER]
    cmd = [
        sys.executable, *launcher, "bench", spec, "--json", "--no-plain",
        "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch", str(a.batch),
        "--set", f"arch.H_cycles={h}", "--set", f"arch.L_cycles={lc}",
        "--set", f"runtime.precision={precision}", "--set", f"runtime.compile={compile_}",
        "--set", f"runtime.threads={a.threads}", "--plugins", "no:curriculum",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"command": " ".join(cmd), "error": out.stderr.strip()[-400:]}
    doc = json.loads(out.stdout)
    trm = doc.get("trm", doc)
    steps = list(trm.get("step_s") or [])
    return {
        "command": " ".join(cmd),
        "s_per_step_median": statistics.median(steps) if steps else None,
        "warmup_s": sum(trm.get("warmup_s") or []),
        "samples_per_s": doc.get("samples_per_s"),
        "precision": doc.get("precision"),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--spec", default="sudoku9-laptop")
    p.add_argument("--depths", default="2,3")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--variants", default="", help="comma-separated names (default: all four)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    p.add_argument("--out")
    a = p.parse_args()
    load_before = uptime()
    rows = []
    for depth in a.depths.split(";"):
        h, lc = (int(x) for x in depth.split(","))
        for r in range(a.rounds):
            for name, precision, compile_ in VARIANTS:
                if a.variants and name not in a.variants.split(","):
                    continue
                row = {"depth": [h, lc], "round": r, "variant": name}
                row.update(bench_once(a.spec, h, lc, precision, compile_, a))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    doc = {
        "what": f"seconds per training step of {a.spec}, four precision/compile variants, "
        "alternated in one invocation",
        "command": " ".join(["python", *sys.argv]),
        "provenance": provenance(),
        "load_before": load_before,
        "load_after": uptime(),
        "threads": a.threads,
        "clock": a.clock,
        "rows": rows,
    }
    text = json.dumps(doc, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
