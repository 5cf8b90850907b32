"""The first GPU run: one command that shows trm works on an NVIDIA GPU, and how fast.

Usage: python benchmarks/gpu.py --out DIR [--peers PATH] [--json] [--dry-run] [--bench-steps 5]
[--bench-batch N] [--skip-bench] [--skip-torchrun] [--from-json FILE]

Run it after the README's install (``pip install torch==2.13.0 -e .``, the CUDA build of torch
on Linux). Every stage runs ``trm`` (or torchrun) as a subprocess, so it tests what users run:

1. environment: the driver (nvidia-smi), torch.cuda and the GPUs, bf16, the compile toolchain
   torch.compile needs on CUDA (Triton, a C compiler, the Python headers), NCCL when there
   are at least two GPUs — probed in a child process, so this one holds no CUDA context;
2. the quickstart trained on the GPU to its accuracy: ``trm run quickstart --set
   runtime.device=cuda`` (the README's expectation: at least 95% exact accuracy);
3. the memory estimate against the measured peak: ``trm estimate`` of the run's resolved
   spec (``--json``: its device items, the CUDA context left out since PyTorch's allocator
   does not hold it) against the largest ``mem_device_mb`` of the run's metrics
   (``torch.cuda.max_memory_allocated`` per step);
4. ``trm bench --json`` of the paper's shapes — the Sudoku MLP (specs/sudoku-extreme-mlp),
   Maze and ARC attention (maze-hard-att, arc-agi-1): samples/s, MFU against the GPU's
   datasheet dense bf16 peak (the headline, where trm.plugins.measure.datasheet knows the GPU) and
   against its measured bf16 GEMM peak, and the plain eager fp32 loop of the same model
   (``speedup_vs_plain``);
5. with ``--peers PATH`` (a TinyRecursiveModels checkout): ``benchmarks/peers.py`` for each
   of the three shapes (the Sudoku MLP, the 900-token attention shape, the quickstart) —
   trm's training step against the official model and lucidrains' tiny-recursive-model,
   alternated, samples/s, MFU and trm / peer; each shape's document is kept in
   ``DIR/peers``;
6. with two GPUs or more: a 2-rank torchrun of the quickstart whose rank 1 is killed
   (SIGKILL, the faults plugin) at step 50 under ``--max-restarts 1``: the job must resume
   and end with both ranks' weights equal.

Estimated time on one H100 (:data:`STAGE_ESTIMATE_S`, compilation included; the dry run
prints them): about 9 minutes with ``--peers`` and one GPU, as measured on an H100. The
peer stages run last but the torchrun one, each stopped at :data:`PEERS_TIMEOUT_S`.

It writes ``gpu-acceptance.json`` (one document) and ``gpu-acceptance.md`` (its tables, for
docs/performance.md) into ``--out``, prints the table (or the JSON with ``--json``) and exits
1 when a stage failed. Without CUDA (this CPU machine) it is a dry run: it prints what it would
run and exits 0, writing nothing. ``--from-json FILE`` prints the tables of a saved document.
Wall-clock figures depend on what else the GPU and CPU run; the document records the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

ACCURACY_GOAL = 0.95  # the README's expectation for the quickstart
BENCH_SPECS = ("sudoku-extreme-mlp", "maze-hard-att", "arc-agi-1")
KILL_STEP = 50  # the step after which the torchrun stage kills rank 1
DOCUMENT = "gpu-acceptance"
STAGE_TIMEOUT_S = 3600
BENCHMARKS = Path(__file__).resolve().parent
PEER_SHAPES = ("sudoku-extreme-mlp", "maze-hard-att", "quickstart")
PEERS_TIMEOUT_S = 120
# Seconds of each stage on one H100, compilation included, as measured on 2026-11-27
# (benchmarks/results/gpu-acceptance-h100.json; environment and memory estimate not timed
# apart): the quickstart's 800 steps with its evaluations 53 s; the three benches 50 s each;
# a peer shape (its data, two compiles, 3 x 5 windows) 101 s for the Sudoku MLP, about 110 s
# for the 900-token shape; the quickstart's peer shape was not reached.
STAGE_ESTIMATE_S = {
    "environment": 10,
    "quickstart": 55,
    "memory estimate": 10,
    "bench": 50,
    "peers": 105,
    "torchrun": 120,
}


# ---------------------------------------------------------------------------- environment


def probe_environment() -> dict[str, Any]:
    """What this machine offers a CUDA run (called in a child process: ``--probe``)."""
    found: dict[str, Any] = {"python": sys.version.split()[0]}
    smi = shutil.which("nvidia-smi")
    found["nvidia_smi"] = smi
    if smi:
        query = [smi, "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"]
        done = subprocess.run(query, capture_output=True, text=True, check=False)
        found["driver"] = done.stdout.strip().splitlines()[0] if done.returncode == 0 else None
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - trm needs torch
        found["torch_error"] = str(exc)
        return found
    found["torch"] = torch.__version__
    found["torch_cuda"] = torch.version.cuda
    found["cuda_available"] = torch.cuda.is_available()
    found["gpus"] = []
    if found["cuda_available"]:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            found["gpus"].append(
                {
                    "index": index,
                    "name": props.name,
                    "memory_bytes": props.total_memory,
                    "capability": f"{props.major}.{props.minor}",
                }
            )
        found["bf16"] = torch.cuda.is_bf16_supported()
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    found["c_compiler"] = os.environ.get("CC") or next(
        (path for name in ("cc", "gcc", "clang") if (path := shutil.which(name))), None
    )
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    found["python_headers"] = str(headers) if headers.exists() else None
    if len(found["gpus"]) >= 2:
        import torch.distributed as dist

        found["nccl"] = dist.is_nccl_available()
        try:
            found["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # reported as unknown, not fatal
            found["nccl_version"] = None
    return found


def environment_stage(found: dict[str, Any]) -> dict[str, Any]:
    """The environment check's verdict: what is missing, in words."""
    problems = []
    if not found.get("cuda_available"):
        problems.append("torch.cuda is not available (a CPU build of torch, or no driver)")
    if found.get("cuda_available") and not found.get("bf16"):
        problems.append("the GPU does not support bf16 (runs use fp32)")
    toolchain = [name for name in ("triton", "c_compiler", "python_headers") if not found.get(name)]
    if toolchain:
        problems.append(
            f"torch.compile cannot build kernels (missing: {', '.join(toolchain)}): trm "
            "runs eager and says so"
        )
    if len(found.get("gpus") or []) >= 2 and not found.get("nccl"):
        problems.append("NCCL is not available: torchrun on the GPUs cannot work")
    failed = not found.get("cuda_available")
    return {
        "stage": "environment",
        "ok": not failed,
        "detail": "; ".join(problems) or "driver, CUDA, bf16, Triton, C compiler, headers",
        "found": found,
    }


# ---------------------------------------------------------------------------- stages


def trm(*args: str) -> list[str]:
    return [sys.executable, "-m", "trm", *args]


def run_logged(
    command: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = STAGE_TIMEOUT_S,
) -> int:
    """Run ``command`` with its output in ``log``; its exit status (124 when it ran past
    ``timeout_s`` and was stopped)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        try:
            done = subprocess.run(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
                check=False,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            return 124
    return done.returncode


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def quickstart_commands(out: Path) -> list[list[str]]:
    run_dir = out / "runs" / "quickstart"
    train = trm("run", "quickstart", "--set", "runtime.device=cuda", "--out", str(run_dir))
    return [
        [*train, "--resume", "never", "--replace"],
        trm("estimate", str(run_dir / "spec.toml"), "--json"),
    ]


def quickstart_stage(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train the quickstart on the GPU; then its estimate against its measured peak."""
    run_dir = out / "runs" / "quickstart"
    train, estimate = quickstart_commands(out)
    started = time.perf_counter()
    code = run_logged(train, out / "logs" / "quickstart.log")
    wall_s = time.perf_counter() - started
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    steps = [r for r in read_rows(run_dir) if "kind" not in r]
    accuracy = summary.get("best_exact_accuracy")
    peaks = [r["mem_device_mb"] for r in steps if r.get("mem_device_mb") is not None]
    speeds = sorted(r["samples_per_s"] for r in steps[1:] if r.get("samples_per_s"))
    run = {
        "stage": "quickstart",
        "ok": code == 0 and accuracy is not None and accuracy >= ACCURACY_GOAL,
        "detail": f"exit {code}; best exact accuracy {accuracy} (goal {ACCURACY_GOAL})",
        "exit_code": code,
        "best_exact_accuracy": accuracy,
        "training_wall_s": summary.get("wall_s"),
        "command_wall_s": round(wall_s, 1),
        "median_samples_per_s": speeds[len(speeds) // 2] if speeds else None,
        "device": summary.get("device"),
        "precision": summary.get("precision"),
        "measured_peak_mb": max(peaks) if peaks else None,
    }
    memory = memory_stage(estimate, run["measured_peak_mb"])
    return run, memory


def memory_stage(command: list[str], measured_mb: float | None) -> dict[str, Any]:
    """``trm estimate --json`` of the run's spec against the run's measured peak."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or measured_mb is None:
        return {
            "stage": "memory estimate",
            "ok": False,
            "detail": f"estimate exit {done.returncode}; measured peak {measured_mb}",
        }
    document = json.loads(done.stdout)
    device_items = [i for i in document["items"] if i["location"] == "device"]
    allocator_bytes = sum(i["bytes"] for i in device_items if i["name"] != "CUDA context")
    estimate_mb = allocator_bytes / 2**20
    return {
        "stage": "memory estimate",
        "ok": True,
        "detail": "device items without the CUDA context vs max_memory_allocated",
        "estimate_mb": round(estimate_mb, 1),
        "estimate_with_context_mb": round(document["device_total_bytes"] / 2**20, 1),
        "measured_peak_mb": measured_mb,
        "estimate_over_measured": round(estimate_mb / measured_mb, 3) if measured_mb else None,
    }


def bench_command(spec: str, steps: int, batch: int | None) -> list[str]:
    command = trm("bench", spec, "--set", "runtime.device=cuda", "--json", "--steps", str(steps))
    return command + (["--batch", str(batch)] if batch else [])


def bench_stage(spec: str, steps: int, batch: int | None, out: Path) -> dict[str, Any]:
    """``trm bench --json`` of one spec on the GPU."""
    command = bench_command(spec, steps, batch)
    log = out / "logs" / f"bench-{spec}.log"
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(done.stderr)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"stage": f"bench {spec}", "ok": False, "detail": tail[0]}
    result = json.loads(done.stdout)
    keep = (
        "batch_size",
        "precision",
        "compiled",
        "samples_per_s",
        "achieved_gflops",
        "peak_gflops",
        "mfu",
        "plain_samples_per_s",
        "speedup_vs_plain",
    )
    named = ("mfu_basis", "mfu_datasheet", "mfu_datasheet_basis", "headline_mfu")
    return {
        "stage": f"bench {spec}",
        "ok": True,
        "detail": "",
        **{k: result[k] for k in keep},
        **{k: result.get(k) for k in named},
    }


def peers_command(reference: Path, shape: str, out: Path) -> list[str]:
    document = out / "peers" / f"peers-{shape}.json"
    return [
        sys.executable,
        str(BENCHMARKS / "peers.py"),
        "--reference",
        str(reference),
        "--shapes",
        shape,
        "--rounds",
        "3",
        "--steps",
        "5",
        "--warmup",
        "2",
        "--out",
        str(document),
    ]


def peers_stage(reference: Path, shape: str, out: Path) -> dict[str, Any]:
    """``benchmarks/peers.py`` of one shape: trm against the official model and lucidrains'."""
    log = out / "logs" / f"peers-{shape}.log"
    code = run_logged(peers_command(reference, shape, out), log, timeout_s=PEERS_TIMEOUT_S)
    path = out / "peers" / f"peers-{shape}.json"
    document = json.loads(path.read_text()) if path.exists() else {}
    shapes = document.get("shapes") or [{}]
    rows = [
        {
            k: row.get(k)
            for k in ("implementation", "status", "samples_per_s", "mfu", "trm_over_peer")
        }
        for row in shapes[0].get("rows", [])
    ]
    measured = any(r["implementation"] == "trm" and r["status"] == "measured" for r in rows)
    stopped = " (stopped at the stage's time limit)" if code == 124 else ""
    return {
        "stage": f"peers {shape}",
        "ok": code == 0 and measured,
        "detail": f"exit {code}{stopped}; {path.name}",
        "batch_size": shapes[0].get("batch_size"),
        "rows": rows,
    }


def torchrun_command(out: Path) -> list[str]:
    run_dir = out / "runs" / "quickstart-2-ranks"
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "-m",
        "trm",
        "run",
        "quickstart",
        "--set",
        "runtime.device=cuda",
        "--out",
        str(run_dir),
        "--resume",
        "never",
        "--replace",
        "--plugins",
        "faults",
    ]


def torchrun_stage(out: Path) -> dict[str, Any]:
    """2 ranks on 2 GPUs, rank 1 killed after step KILL_STEP: the job resumes and ends."""
    env = {**os.environ, "TRM_FAULTS": f"kill@{KILL_STEP}", "TRM_FAULTS_RANKS": "1"}
    log = out / "logs" / "torchrun.log"
    code = run_logged(torchrun_command(out), log, env)
    summary_path = out / "runs" / "quickstart-2-ranks" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    resumed = "resumed from step" in log.read_text()
    ok = code == 0 and resumed and summary.get("ranks_agree") is True
    return {
        "stage": "torchrun 2 GPUs, rank 1 killed",
        "ok": ok,
        "detail": f"exit {code}; resumed {resumed}; ranks agree {summary.get('ranks_agree')}",
        "best_exact_accuracy": summary.get("best_exact_accuracy"),
    }


# ---------------------------------------------------------------------------- the document


def plan(args: argparse.Namespace, gpus: int) -> list[str]:
    """Every command the acceptance run would run, as shell lines."""
    import shlex

    def took(stage: str) -> str:
        return f"   # about {STAGE_ESTIMATE_S[stage]} s"

    lines = [
        f"{sys.executable} {__file__} --probe   # the environment, in a child process"
        + took("environment").replace("   #", ";")
    ]
    train, estimate = quickstart_commands(args.out)
    lines += [
        shlex.join(train) + took("quickstart"),
        shlex.join(estimate) + took("memory estimate"),
    ]
    if not args.skip_bench:
        lines += [
            shlex.join(bench_command(s, args.bench_steps, args.bench_batch)) + took("bench")
            for s in BENCH_SPECS
        ]
    if args.peers is not None:
        lines += [
            shlex.join(peers_command(args.peers, s, args.out)) + took("peers") for s in PEER_SHAPES
        ]
    if not args.skip_torchrun:
        line = f"TRM_FAULTS=kill@{KILL_STEP} TRM_FAULTS_RANKS=1 " + shlex.join(
            torchrun_command(args.out)
        )
        lines.append(line + ("" if gpus >= 2 else "   # only with two GPUs or more"))
    return lines


def estimated_s(args: argparse.Namespace, gpus: int) -> int:
    """The acceptance run's estimated seconds on one H100 (:data:`STAGE_ESTIMATE_S`)."""
    total = sum(STAGE_ESTIMATE_S[s] for s in ("environment", "quickstart", "memory estimate"))
    total += 0 if args.skip_bench else STAGE_ESTIMATE_S["bench"] * len(BENCH_SPECS)
    total += 0 if args.peers is None else STAGE_ESTIMATE_S["peers"] * len(PEER_SHAPES)
    runs_torchrun = not args.skip_torchrun and gpus >= 2
    return total + (STAGE_ESTIMATE_S["torchrun"] if runs_torchrun else 0)


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    """One row per stage: stage, verdict, its main figures, detail."""

    def fmt(value: Any, digits: int = 1) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return str(value)

    rows = []
    for stage in document["stages"]:
        name = stage["stage"]
        verdict = "ok" if stage["ok"] else "FAILED"
        if name.startswith("peers"):
            parts = []
            for row in stage.get("rows", []):
                if row["status"] != "measured":
                    parts.append(f"{row['implementation']}: {row['status']}")
                    continue
                ratio = row.get("trm_over_peer")
                parts.append(
                    f"{row['implementation']} {fmt(row.get('samples_per_s'))} samples/s"
                    + (f" (trm/{row['implementation']} {ratio:.2f}x)" if ratio else "")
                )
            figures = f"batch {stage.get('batch_size')}: " + "; ".join(parts)
        elif name.startswith("bench"):
            headline = ""
            if stage.get("mfu_datasheet") is not None:
                headline = (
                    f"MFU {fmt(100 * stage['mfu_datasheet'])}% of the "
                    f"{stage.get('mfu_datasheet_basis')}; "
                )
            figures = headline + (
                f"{fmt(stage.get('samples_per_s'))} samples/s, MFU "
                f"{fmt(100 * stage['mfu'] if stage.get('mfu') is not None else None)}% of "
                f"{fmt(stage.get('peak_gflops'), 0)} GFLOP/s ({stage.get('precision')}), "
                f"{fmt(stage.get('speedup_vs_plain'), 2)}x plain eager"
            )
        elif name == "quickstart":
            figures = (
                f"accuracy {fmt(stage.get('best_exact_accuracy'), 3)}, "
                f"{fmt(stage.get('training_wall_s'))} s, peak "
                f"{fmt(stage.get('measured_peak_mb'))} MiB"
            )
        elif name == "memory estimate":
            figures = (
                f"estimate {fmt(stage.get('estimate_mb'))} MiB vs measured "
                f"{fmt(stage.get('measured_peak_mb'))} MiB "
                f"(x{fmt(stage.get('estimate_over_measured'), 2)})"
            )
        else:
            figures = ""
        rows.append([name, verdict, figures, stage.get("detail", "")])
    return rows


HEADERS = ("stage", "result", "figures", "detail")


def markdown(document: dict[str, Any]) -> str:
    """The document as a Markdown section for docs/performance.md."""
    gpus = document["environment"].get("gpus") or []
    names = ", ".join(g["name"] for g in gpus) or "no GPU"
    env = document["environment"]
    lines = [
        f"GPU acceptance run of {document['date']}: {names}; driver {env.get('driver')}; "
        f"torch {env.get('torch')} (CUDA {env.get('torch_cuda')}); Triton {env.get('triton')}."
        + ("" if document.get("complete", True) else " Stopped before its last stage."),
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    for row in table_rows(document):
        cells = [cell.replace("|", "\\|") for cell in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def print_table(document: dict[str, Any]) -> None:
    from tables import print_rows

    print_rows(HEADERS, table_rows(document))


def write_document(out: Path, document: dict[str, Any]) -> None:
    """``gpu-acceptance.json`` and ``.md`` in ``out``, replaced whole (a temporary file each)."""
    for suffix, text in (
        (".json", json.dumps(document, indent=2) + "\n"),
        (".md", markdown(document)),
    ):
        path = out / f"{DOCUMENT}{suffix}"
        partial = path.with_suffix(suffix + ".tmp")
        partial.write_text(text)
        partial.replace(path)


def acceptance(args: argparse.Namespace, found: dict[str, Any]) -> dict[str, Any]:
    """Run every stage on the GPU; the document. It is written after each stage (``complete``
    false until the last), so a run stopped part-way keeps the stages it finished."""
    out = args.out
    stages = [environment_stage(found)]
    from provenance import provenance

    started = time.perf_counter()
    document = {
        "provenance": provenance(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "environment": found,
        "stages": stages,
        "ok": False,
        "complete": False,
    }

    def record(*done: dict[str, Any]) -> None:
        stages.extend(done)
        for stage in stages:  # when each stage ended, from the start of the run
            stage.setdefault("finished_after_s", round(time.perf_counter() - started, 1))
        document["ok"] = all(stage["ok"] for stage in stages)
        write_document(out, document)

    record()
    record(*quickstart_stage(out))
    if not args.skip_bench:
        for spec in BENCH_SPECS:
            record(bench_stage(spec, args.bench_steps, args.bench_batch, out))
    if getattr(args, "peers", None) is not None:
        for shape in PEER_SHAPES:
            record(peers_stage(args.peers, shape, out))
    if not args.skip_torchrun and len(found.get("gpus") or []) >= 2:
        record(torchrun_stage(out))
    document["complete"] = True
    record()
    return document


def probe_in_child() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--probe"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"probe_error": done.stderr.strip().splitlines()[-1:] or ["no output"]}
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the runs, logs and the document")
    parser.add_argument(
        "--peers",
        type=Path,
        metavar="PATH",
        help="a TinyRecursiveModels checkout: add trm against its model (and lucidrains')",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON document")
    parser.add_argument("--dry-run", action="store_true", help="print what would run")
    parser.add_argument("--bench-steps", type=int, default=5, help="timed steps of trm bench")
    parser.add_argument("--bench-batch", type=int, help="trm bench --batch (default: the spec's)")
    parser.add_argument("--skip-bench", action="store_true", help="leave out trm bench")
    parser.add_argument("--skip-torchrun", action="store_true", help="leave out torchrun")
    parser.add_argument("--from-json", type=Path, help="print the tables of a saved document")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe_environment()))
        return 0
    if args.from_json:
        document = json.loads(args.from_json.read_text())
        print(json.dumps(document, indent=2) if args.json else markdown(document), end="")
        return 0
    if args.out is None:
        parser.error("--out DIR is required: the runs, logs and the document go there")
    if args.peers is not None and not args.peers.is_dir():
        parser.error(f"--peers {args.peers}: no such folder; give a TinyRecursiveModels checkout")
    found = probe_in_child()
    gpus = len(found.get("gpus") or [])
    if args.dry_run or not found.get("cuda_available"):
        why = "asked for (--dry-run)" if args.dry_run else environment_stage(found)["detail"]
        commands = plan(args, gpus)
        total_s = estimated_s(args, gpus)
        if args.json:
            document = {
                "dry_run": True,
                "reason": why,
                "commands": commands,
                "estimated_s_on_one_h100": total_s,
            }
            print(json.dumps(document, indent=2))
        else:
            print(f"dry run: {why}; nothing is run or written. On a CUDA machine this runs:")
            for line in commands:
                print(f"  {line}")
            print(f"and writes {args.out / (DOCUMENT + '.json')} and {DOCUMENT}.md there")
            print(f"estimated time on one H100: about {total_s / 60:.1f} minutes")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    document = acceptance(args, found)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_table(document)
    return 0 if document["ok"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # for ``tables``
    sys.exit(main())
