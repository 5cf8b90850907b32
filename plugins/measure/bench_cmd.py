"""``trm bench SPEC``: samples/s, GFLOP/s and MFU of the real loop, and the plain-loop ratio."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from trm.cli.common import add_set_option, positive_int, positive_seconds
from trm.cli.output import info, print_json
from trm.errors import TrmError
from trm.plan.pipeline import choose_runtime, detect_hardware
from trm.plugin_manager import load_plugins
from trm.plugins.measure.bench import CPU_DEFAULT_BATCH, BenchResult, choose_batches, run_bench
from trm.plugins.measure.datasheet import accelerator_name
from trm.spec import apply_overrides, load_spec, resolve_spec_path


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "bench", parents=[common], help="measure training speed, GFLOP/s and MFU of a spec"
    )
    parser.add_argument("spec", help="a TOML file or the name of a shipped spec")
    parser.add_argument(
        "--steps", type=positive_int, default=3, help="timed steps after warm-up (default 3)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        metavar="N",
        help="untimed first steps, where compilation happens (default 2)",
    )
    parser.add_argument(
        "--batch",
        type=positive_int,
        help="samples per step (default: on a GPU the micro-batch trm run plans; on a CPU "
        f"the spec's micro-batch or global batch, at most {CPU_DEFAULT_BATCH})",
    )
    add_set_option(parser)
    parser.add_argument(
        "--no-plain", action="store_true", help="skip timing the plain eager fp32 loop"
    )
    parser.add_argument(
        "--peak-seconds",
        type=positive_seconds,
        default=1.5,
        metavar="S",
        help="time for each matmul-peak measurement (default 1.5)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.warmup < 1:
        raise TrmError(
            f"--warmup must be at least 1 (compilation happens there), got {args.warmup}"
        )
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins)
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    for note in runtime.notes:
        info(note)
    batches = choose_batches(pm, spec, hardware, runtime, args.batch)
    for note in batches.notes:
        info(note)
    result = run_bench(
        batches.spec,
        batches.runtime,
        list(args.plugins),
        steps=args.steps,
        warmup=args.warmup,
        batch_size=batches.trm,
        plain=not args.no_plain,
        log=info,
        peak_s=args.peak_seconds,
        plain_batch_size=batches.plain,
        device_name=accelerator_name(hardware, batches.runtime.device),
        hardware=hardware,
    )
    if args.json:
        print_json(result.to_dict())
    else:
        print_table(result)
    return 0


def print_table(r: BenchResult) -> None:
    """The human-readable report."""
    mode = f"{r.precision}, {'compiled' if r.compiled else 'eager'}, {r.threads} threads"
    table = Table(title=f"trm bench {r.spec} on {r.device} ({mode}), batch {r.batch_size}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("samples/s (trm)", f"{r.samples_per_s:.3f}")
    table.add_row("model FLOPs per sample", f"{r.flops_per_sample / 1e9:.2f} G")
    if r.attention_density < 1.0:
        table.add_row("attention density", f"{r.attention_density:.1%} of query-key pairs")
    table.add_row("achieved", f"{r.achieved_gflops:.1f} GFLOP/s")
    table.add_row(f"matmul peak ({r.precision})", f"{r.peak_gflops:.1f} GFLOP/s")
    if r.mfu_datasheet is not None:
        table.add_row(f"MFU ({r.mfu_datasheet_basis})", f"{r.mfu_datasheet:.3f}")
    table.add_row(f"MFU ({r.mfu_basis})", f"{r.mfu:.3f}")
    if r.compile_s is not None:
        table.add_row("compile seconds (warm-up above its steps)", f"{r.compile_s:.1f} s")
        table.add_row("torch's on-disk compile cache", r.compile_cache or "unknown")
    if r.compile_ledger_key is not None:
        table.add_row("recorded for the compile decision", "yes (trm's compile ledger)")
    if r.plain_samples_per_s is not None:
        plain_batch = "" if r.plain_batch_size == r.batch_size else f", batch {r.plain_batch_size}"
        table.add_row(f"samples/s (plain eager fp32{plain_batch})", f"{r.plain_samples_per_s:.3f}")
        if r.plain_mfu_fp32 is not None:
            table.add_row("plain MFU (of the fp32 peak)", f"{r.plain_mfu_fp32:.3f}")
        table.add_row("trm / plain", f"{r.speedup_vs_plain:.2f}x")
    table.add_row("other processes' CPU share (trm)", f"{r.other_load_trm:.0%}")
    if r.other_load_plain is not None:
        table.add_row("other processes' CPU share (plain)", f"{r.other_load_plain:.0%}")
    Console().print(table)
