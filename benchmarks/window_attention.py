"""Local 2-D attention window vs dense attention (``arch.attention_window``).

Two measurements, each printing a table and, with ``--json``, a results document:

``speed``: samples/s and peak memory of one training step (one supervision step forward,
backward and an AdamW update) at seq_len 900 — a 30 × 30 grid after a 16-token puzzle prefix,
the Maze-Hard / ARC shape — dense and windowed, alternating A B A B in one invocation.
Compiled with torch.compile unless ``--eager``. On a CUDA device the windowed step runs
FlexAttention's block-sparse kernel (compiled) and the peak is torch's allocator peak for
the step; on the CPU torch has no FlexAttention backward, so the windowed step runs
``scaled_dot_product_attention`` with the boolean mask, and each measurement runs in a fresh
process whose peak resident size (``ru_maxrss``) is the step's peak::

    python benchmarks/window_attention.py speed --window 2 --hidden 128 --batch 2 --json OUT

``accuracy``: held-out exact accuracy of maze-small (specs/maze-small.toml with attention
and RoPE in place of its MLP across positions) at equal steps, dense and windowed, the
runs' own metrics and the time they took::

    nice -n 10 python benchmarks/window_attention.py accuracy --window 1 --steps 300 --json OUT
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import provenance

REPO = Path(__file__).resolve().parent.parent
PREFIX, SIDE, VOCAB = 16, 30, 6


# ------------------------------------------------------------------ speed


def speed_arch(hidden: int, window: int):
    """The maze-hard-att network (its depth, heads and prefix) at width ``hidden``."""
    from trm.spec import ArchSpec

    return ArchSpec(
        hidden_size=hidden,
        num_heads=max(1, hidden // 64),
        L_layers=2,
        H_cycles=3,
        L_cycles=4,
        pos_encodings="rope",
        mlp_t=False,
        puzzle_emb_ndim=hidden,
        puzzle_emb_len=PREFIX,
        halt_max_steps=16,
        attention_window=window,
    )


def measure_speed(
    window: int, hidden: int, batch: int, steps: int, device: str, compiled: bool, bf16: bool
) -> dict[str, Any]:
    """Build, warm up (two steps: compilation) and time ``steps`` training steps."""
    import torch
    import torch.nn.functional as F

    from trm.measure.flops import model_flops
    from trm.model import TinyRecursiveModel

    torch.manual_seed(0)
    arch = speed_arch(hidden, window)
    seq = SIDE * SIDE
    model = TinyRecursiveModel(arch, seq, VOCAB, 1).to(device).train()
    if compiled:
        model.net.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    data = {
        "inputs": torch.randint(1, VOCAB, (batch, seq), generator=gen).to(device),
        "labels": torch.randint(1, VOCAB, (batch, seq), generator=gen).to(device),
        "puzzle_identifiers": torch.zeros(batch, dtype=torch.long, device=device),
    }
    dev_type = torch.device(device).type
    cuda = dev_type == "cuda"

    def step() -> None:
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=bf16):
            _, out = model(model.initial_carry(data), data)
            loss = F.cross_entropy(out["logits"].float().flatten(0, 1), data["labels"].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    warm_start = time.perf_counter()
    for _ in range(2):
        step()
    if cuda:
        torch.cuda.synchronize()
    warmup_s = time.perf_counter() - warm_start
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    step_s = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        step_s.append(time.perf_counter() - start)
    mask = model.attention_mask(torch.device(device))  # what a step with gradients takes
    kernel = "dense sdpa"
    if mask is not None:
        kernel = "flex_attention"
        if isinstance(mask, torch.Tensor):
            kernel = f"masked sdpa ({'additive' if mask.is_floating_point() else 'boolean'})"
    best = min(step_s)
    result = {
        "window": window,
        "kernel": kernel,
        "attention_density": model_flops(arch, seq, VOCAB).attention_density,
        "flops_per_sample": model_flops(arch, seq, VOCAB).per_sample,
        "warmup_s": round(warmup_s, 2),
        "step_s": [round(s, 4) for s in step_s],
        "samples_per_s": round(batch * len(step_s) / sum(step_s), 3),
        "best_samples_per_s": round(batch / best, 3),
    }
    if cuda:
        result["peak_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        result["peak_memory_basis"] = "torch.cuda.max_memory_allocated over the timed steps"
    else:
        result["peak_memory_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        )
        result["peak_memory_basis"] = "peak resident size of a fresh process (ru_maxrss)"
    return result


def run_speed(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    bf16 = args.bf16 if args.bf16 is not None else device == "cuda"
    order = [0, args.window] * args.rounds  # A B A B
    rows = []
    for window in order:
        if device == "cpu":  # a fresh process each, so ru_maxrss is this measurement's
            child = [
                sys.executable,
                __file__,
                "speed-child",
                json.dumps(
                    [window, args.hidden, args.batch, args.steps, device, not args.eager, bf16]
                ),
            ]
            out = subprocess.run(child, capture_output=True, text=True, check=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
        else:
            row = measure_speed(
                window, args.hidden, args.batch, args.steps, device, not args.eager, bf16
            )
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"

    def mean(window: int, key: str) -> float:
        values = [r[key] for r in rows if r["window"] == window]
        return round(sum(values) / len(values), 3)

    summary = {
        str(w): {
            "samples_per_s": mean(w, "samples_per_s"),
            "peak_memory_mib": mean(w, "peak_memory_mib"),
            "attention_density": next(r["attention_density"] for r in rows if r["window"] == w),
            "kernel": next(r["kernel"] for r in rows if r["window"] == w),
        }
        for w in (0, args.window)
    }
    return {
        "measurement": "speed",
        "device": device,
        "device_name": device_name,
        "torch": torch.__version__,
        "compiled": not args.eager,
        "precision": "bf16" if bf16 else "fp32",
        "shape": {"prefix": PREFIX, "grid_side": SIDE, "positions": PREFIX + SIDE * SIDE},
        "arch": {
            "hidden_size": args.hidden,
            "num_heads": max(1, args.hidden // 64),
            "L_layers": 2,
            "H_cycles": 3,
            "L_cycles": 4,
        },
        "batch": args.batch,
        "steps_timed": args.steps,
        "order": order,
        "rows": rows,
        "summary": summary,
        "uptime": _uptime(),
    }


# ------------------------------------------------------------------ accuracy


def run_accuracy(args: argparse.Namespace) -> dict[str, Any]:
    """maze-small with attention + RoPE, dense and windowed, ``--steps`` each."""
    out_root = Path(args.out)
    rows = []
    for window in [0, args.window] * args.seeds_rounds:
        run = out_root / f"w{window}-s{args.seed}"
        command = [
            "trm", "run", str(REPO / "specs" / "maze-small.toml"),
            "--set", "arch.mlp_t=false", "--set", "arch.pos_encodings=rope",
            "--set", f"arch.attention_window={window}",
            "--set", f"train.seed={args.seed}",
            "--set", f"train.eval_interval={args.steps}",
            "--set", f"train.lr_warmup_steps={min(100, args.steps // 4)}",
            "--set", f"train.max_steps={args.steps}",
            "--out", str(run), "--resume", "never", "--replace",
        ]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        wall_s = time.perf_counter() - start
        summary = json.loads((run / "summary.json").read_text())
        evals = [
            json.loads(line)
            for line in (run / "metrics.jsonl").read_text().splitlines()
            if '"eval' in line
        ]
        last = evals[-1] if evals else {}
        row = {
            "window": window,
            "seed": args.seed,
            "steps": args.steps,
            "wall_s": round(wall_s, 1),
            "command": " ".join([*command[:2], "specs/maze-small.toml", *command[3:]]),
            "eval": {k: v for k, v in last.items() if "acc" in k or k in ("step", "split")},
            "train_wall_s": summary.get("wall_s"),
            "summary": {k: v for k, v in summary.items() if "acc" in k or "step" in k},
        }
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    return {"measurement": "accuracy", "rows": rows, "uptime": _uptime()}


# ------------------------------------------------------------------ output


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def print_table(doc: dict[str, Any]) -> None:
    if doc["measurement"] == "speed":
        print(f"| window | kernel | density | samples/s | peak MiB ({doc['device_name']}) |")
        print("|---|---|---|---|---|")
        for window, s in doc["summary"].items():
            print(
                f"| {window} | {s['kernel']} | {s['attention_density']:.3f} | "
                f"{s['samples_per_s']} | {s['peak_memory_mib']} |"
            )
    else:
        print("| window | seed | steps | wall s | eval |")
        print("|---|---|---|---|---|")
        for r in doc["rows"]:
            print(f"| {r['window']} | {r['seed']} | {r['steps']} | {r['wall_s']} | {r['eval']} |")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "speed-child":
        print(json.dumps(measure_speed(*json.loads(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    speed = sub.add_parser("speed")
    speed.add_argument("--window", type=int, default=2)
    speed.add_argument("--hidden", type=int, default=512)
    speed.add_argument("--batch", type=int, default=2)
    speed.add_argument("--steps", type=int, default=3)
    speed.add_argument("--rounds", type=int, default=2)
    speed.add_argument("--device", default="")
    speed.add_argument("--eager", action="store_true")
    speed.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None)
    accuracy = sub.add_parser("accuracy")
    accuracy.add_argument("--window", type=int, default=1)
    accuracy.add_argument("--steps", type=int, default=300)
    accuracy.add_argument("--seed", type=int, default=0)
    accuracy.add_argument("--seeds-rounds", type=int, default=1)
    accuracy.add_argument("--out", default="runs/window-ablation")
    for p in (speed, accuracy):
        p.add_argument("--json", default="", help="write the results document here")
    args = parser.parse_args()
    doc = run_speed(args) if args.what == "speed" else run_accuracy(args)
    doc = {"provenance": provenance(), **doc}
    print_table(doc)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
