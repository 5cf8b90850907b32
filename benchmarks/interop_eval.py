"""What evaluating imported weights costs: memory and time of ``trm eval`` for a spec's model.

Usage: python benchmarks/interop_eval.py [SPEC] [--rows N] [--batch B] [--json]
       python benchmarks/interop_eval.py --derive FILE
(default: arc-agi-1, the paper's ARC-AGI-1 recipe, the shape of the published checkpoints;
ARC-AGI-1's test split of 385,815 rows; eval batch 256, trm eval's default).

Memory (estimate, from the model trm builds and the dataset shape the source promises):
weights, the puzzle table, the carry of one eval batch and the largest transient of one
network call (the SwiGLU's fused projection, or attention's scores). FLOPs per row (analytic,
trm.measure.flops): ``halt_max_steps`` supervision steps of ``H_cycles x (L_cycles + 1)``
network calls plus the heads. Time: this CPU is *measured* (random weights, one supervision
step of a small batch, float32, times ``halt_max_steps``: the steps cost the same); the Apple
GPU and NVIDIA H100 figures are *estimates*: the FLOPs at an assumed sustained throughput
(printed with them), since no such machine was measured here.

``--derive FILE`` adds to a saved document a ``derived`` block computed from its raw values
only (nothing is measured): this CPU's seconds a row and hours for 100 rows, every eval time
in minutes, hours, days and years, and the H100 assumption's peak and share, the figures
docs/interop.md shows.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from provenance import provenance

from trm.measure.flops import model_flops
from trm.model import build_model
from trm.plan.dataset import dataset_shape
from trm.plugin_manager import load_plugins
from trm.spec import load_spec, resolve_spec_path

ARC_AGI_1_TEST_ROWS = 385_815
# Assumed sustained throughputs for the estimates (FLOP/s): an M2 Max-class GPU in float32
# under MPS, and one H100 in bf16 at 40% of its 989 TFLOP/s dense peak.
H100_BF16_PEAK_FLOP_PER_S = 989e12
H100_ASSUMED_SHARE_OF_PEAK = 0.4
ASSUMED = {
    "apple-gpu-fp32": 5e12,
    "h100-bf16": H100_ASSUMED_SHARE_OF_PEAK * H100_BF16_PEAK_FLOP_PER_S,
}
SECONDS_PER = {"min": 60.0, "h": 3600.0, "days": 86400.0, "years": 365.25 * 86400.0}


def derived_figures(document: dict[str, Any]) -> dict[str, Any]:
    """The figures a reader wants from a saved document's raw values, in readable units."""
    s_per_row = 1.0 / document["cpu_rows_per_s"]
    return {
        "command": "python benchmarks/interop_eval.py --derive FILE",
        "cpu_s_per_row": s_per_row,
        "cpu_h_for_a_subset": {"rows": 100, "h": 100 * s_per_row / SECONDS_PER["h"]},
        "eval_time": {
            name: {unit: seconds / per for unit, per in SECONDS_PER.items()}
            for name, seconds in document["eval_s"].items()
        },
        "h100_bf16_peak_flop_per_s": H100_BF16_PEAK_FLOP_PER_S,
        "h100_assumed_share_of_peak": H100_ASSUMED_SHARE_OF_PEAK,
    }


def measure_cpu_rows_per_s(model: torch.nn.Module, seq_len: int, steps: int, rows: int) -> float:
    """Rows per second of all ``steps`` supervision steps on this CPU (one step of ``rows``
    rows timed, after one of warm-up)."""
    inputs = torch.randint(0, model.vocab_size, (rows, seq_len))
    batch = {
        "inputs": inputs,
        "labels": inputs,
        "puzzle_identifiers": torch.zeros_like(inputs[:, 0]),
    }
    carry = model.initial_carry(batch)
    with torch.no_grad():
        model(carry, batch)  # warm-up
        started = time.perf_counter()
        model(carry, batch)
        one_step_s = time.perf_counter() - started
    return rows / (one_step_s * steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", nargs="?", default="arc-agi-1")
    parser.add_argument("--rows", type=int, default=ARC_AGI_1_TEST_ROWS)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--measure-rows", type=int, default=8, help="rows timed on the CPU")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--derive", type=Path, metavar="FILE", help="add a derived block")
    args = parser.parse_args()
    if args.derive:
        document = json.loads(args.derive.read_text(encoding="utf-8"))
        document["derived"] = derived_figures(document)
        args.derive.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        return

    spec = load_spec(resolve_spec_path(args.spec))
    pm = load_plugins([])
    with tempfile.TemporaryDirectory() as scratch:
        shape = dataset_shape(pm, spec, Path(scratch))
    torch.manual_seed(0)
    model = build_model(spec.arch, shape).eval()
    a = spec.arch
    table_bytes = model.puzzle_embedding_numel() * 4
    weight_bytes = sum(t.numel() * 4 for t in model.state_dict().values()) - table_bytes
    positions = model.num_positions
    carry_bytes = 2 * args.batch * positions * a.hidden_size * 4
    inner = model.net.layers[0].mlp.inter
    transient = args.batch * positions * 2 * inner * 4
    if not a.mlp_t:
        transient = max(transient, args.batch * a.num_heads * positions * positions * 4)
    memory = {
        "weights_bytes": weight_bytes,
        "puzzle_table_bytes": table_bytes,
        "carry_bytes": carry_bytes,
        "largest_transient_bytes": transient,
    }
    memory["total_bytes"] = sum(memory.values())
    flops = model_flops(a, shape.seq_len, shape.vocab_size)
    per_row = a.halt_max_steps * flops.forward
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cpu_rows_per_s = measure_cpu_rows_per_s(
        model, shape.seq_len, a.halt_max_steps, args.measure_rows
    )
    times = {"this-cpu-measured": args.rows / cpu_rows_per_s}
    times.update({name: args.rows * per_row / rate for name, rate in ASSUMED.items()})
    document = {
        "spec": spec.name,
        "rows": args.rows,
        "batch": args.batch,
        "num_puzzle_identifiers": shape.num_puzzle_identifiers,
        "parameters": model.count_parameters(),
        "memory": memory,
        "flops_per_row": per_row,
        "cpu_rows_per_s": cpu_rows_per_s,
        "cpu_threads": torch.get_num_threads(),
        "measure_rows": args.measure_rows,
        "assumed_flop_per_s": ASSUMED,
        "eval_s": times,
        "provenance": provenance(),
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return
    gib = 2**30
    print(
        f"{spec.name}: {model.count_parameters():,} parameters, "
        f"{shape.num_puzzle_identifiers:,} puzzle identifiers, {args.rows:,} rows"
    )
    for key, value in memory.items():
        print(f"  {key:26s} {value / gib:8.2f} GiB")
    print(f"  FLOPs per row              {per_row / 1e12:8.2f} TFLOP")
    for name, seconds in times.items():
        print(f"  eval time {name:18s} {seconds / 3600:10.1f} h")


if __name__ == "__main__":
    main()
