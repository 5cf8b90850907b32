"""``trm analyze [SPEC]``: what this machine is, how fast it is, and how SPEC fits each tier.

Prints the hardware profile (unknown facts as "unknown"), a performance score with what it
means, then for each tier (conservative, balanced, extreme) the micro-batch, accumulation,
precision, predicted peak memory, predicted samples/s and time to finish the spec's epochs,
and suggestions and warnings. ``--generate-configs DIR`` writes one TOML spec per tier that
``trm run`` accepts unchanged; ``--benchmark`` measures (and caches) the machine's speeds.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import attrs

from trm.cli.output import info, print_json
from trm.errors import TrmError
from trm.hardware import HardwareProfile, describe, format_bytes, profile_to_dict
from trm.memory import DatasetShape, MemoryEstimate
from trm.plugin_manager import TrmPluginManager, load_plugins
from trm.prepare import (
    EXTREME_RISKS,
    MODE_TARGETS,
    MODES,
    adapt_spec,
    choose_runtime,
    detect_hardware,
    estimate_memory,
)
from trm.spec import RunSpec, apply_overrides, load_spec, resolve_spec_path, spec_to_toml

# What a score (best measured matmul TFLOP/s x 100) means for TRM training.
SCORE_MEANINGS = (
    (30, "laptop-class CPU: the quickstart trains in minutes; the paper's recipes take weeks"),
    (300, "workstation CPU or small GPU: mid-size TRMs in hours; paper recipes take days"),
    (3000, "data-centre GPU class: the paper's Sudoku recipes in about a day"),
    (math.inf, "top-end accelerator: the paper's recipes in hours"),
)


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "analyze", parents=[common], help="profile this machine and fit a spec to each tier"
    )
    parser.add_argument(
        "spec", nargs="?", default="quickstart", help="spec to fit (default quickstart)"
    )
    parser.add_argument("--profile-only", action="store_true", help="print only the profile")
    parser.add_argument(
        "--generate-configs", type=Path, metavar="DIR", help="write one spec per tier into DIR"
    )
    parser.add_argument(
        "--benchmark", action="store_true", help="measure matmul, memory and disk speed (cached)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a spec value"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


# ----------------------------------------------------------------------------- speed


def device_peak_gflops(
    hardware: HardwareProfile, device: str, precision: str
) -> tuple[float | None, str]:
    """Matmul GFLOP/s of ``device`` at ``precision``: cached ``--benchmark`` or a quick probe."""
    speed = hardware.speed_of(device)
    if speed is not None:
        value = (
            speed.matmul_bf16_gflops if precision in ("bf16", "fp16") else speed.matmul_fp32_gflops
        )
        if value:
            return value, "measured by trm analyze --benchmark"
    try:
        from trm.peak import measure_gemm_peak

        probe = "bf16" if precision in ("bf16", "fp16") else "fp32"
        return measure_gemm_peak(device, probe, duration_s=0.25).gflops, "quick probe now"
    except Exception:  # no such device here, or the probe failed: say unknown
        return None, "unknown"


def performance_score(gflops: float | None) -> tuple[int | None, str]:
    """Score = best matmul TFLOP/s x 100, with what it means for TRM training."""
    if gflops is None:
        return None, "unknown: the matmul speed could not be measured"
    score = round(gflops / 10)
    for limit, meaning in SCORE_MEANINGS:
        if score < limit:
            return score, meaning
    return score, SCORE_MEANINGS[-1][1]  # pragma: no cover


def total_steps(spec: RunSpec, dataset: DatasetShape) -> int:
    if spec.train.max_steps > 0:
        return spec.train.max_steps
    groups = max(dataset.total_groups, 1)
    return max(1, math.ceil(spec.train.epochs * groups / spec.train.global_batch_size))


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# ----------------------------------------------------------------------------- tiers


def plan_tiers(
    pm: TrmPluginManager,
    spec: RunSpec,
    hardware: HardwareProfile,
    estimate: MemoryEstimate,
    dataset: DatasetShape,
) -> list[dict[str, Any]]:
    """One row per tier: the adapted spec, its estimate, speed and time to finish."""
    from trm.flops import model_flops

    tiers = []
    peaks: dict[tuple[str, str], float | None] = {}  # one probe per device and precision
    for mode in MODES:
        adapted, changes = adapt_spec(pm, spec, hardware, estimate, mode)
        runtime = choose_runtime(pm, adapted, hardware)
        fitted = estimate.for_spec(adapted)
        where = fitted.limiting_location()
        budget = fitted.host_budget_bytes if where == "host" else fitted.device_budget_bytes
        micro = adapted.runtime.micro_batch_size or adapted.train.global_batch_size
        flops = model_flops(adapted.arch, dataset.seq_len, dataset.vocab_size).per_sample
        key = (runtime.device, runtime.precision)
        if key not in peaks:
            peaks[key] = device_peak_gflops(hardware, *key)[0]
        gflops = peaks[key]
        samples_per_s = gflops * 1e9 / flops if gflops else None
        steps = total_steps(adapted, dataset)
        samples = steps * adapted.train.global_batch_size
        tiers.append(
            {
                "mode": mode,
                "target_fraction": MODE_TARGETS[mode],
                "spec": adapted,
                "changes": changes,
                "device": runtime.device,
                "precision": runtime.precision,
                "micro_batch_size": micro,
                "accumulation": math.ceil(adapted.train.global_batch_size / micro),
                "predicted_bytes": fitted.charged_bytes(where),
                "budget_bytes": budget,
                "budget_share": fitted.budget_fraction(),
                "fits": fitted.fits(MODE_TARGETS[mode]),
                "samples_per_s": samples_per_s,
                "steps": steps,
                "time_to_finish_s": samples / samples_per_s if samples_per_s else None,
                "shrunk": any("MODEL SHRUNK" in c["reason"] for c in changes),
            }
        )
    return tiers


def advice(
    hardware: HardwareProfile, tiers: list[dict[str, Any]], estimate: MemoryEstimate
) -> tuple[list[str], list[str]]:
    """(suggestions, warnings) for this machine and spec."""
    suggestions: list[str] = []
    warnings: list[str] = []
    if hardware.device_speeds is None:
        suggestions.append("run `trm analyze --benchmark` once to measure this machine's speeds")
    if hardware.cpu_native_bf16 is False and not hardware.gpus and not hardware.cuda_devices:
        suggestions.append("this CPU has no native bf16: fp32 is used; a GPU would help most")
    if not estimate.fits(1.0):
        warnings.append("the spec as written does not fit the memory budget; use a tier (--mode)")
    for tier in tiers:
        if tier["shrunk"]:
            warnings.append(
                f"{tier['mode']}: even a micro-batch of 1 does not fit, so the MODEL IS SHRUNK "
                "(see the changes); results will differ from the recipe"
            )
    if hardware.on_battery:
        warnings.append("on battery: plug in for long runs (the thermal plugin pauses on battery)")
    if hardware.swap_total_bytes == 0:
        warnings.append("no swap: a run that outgrows memory is killed at once; prefer balanced")
    if hardware.storage_free_bytes is not None and hardware.storage_free_bytes < 2**30:
        warnings.append(
            f"only {format_bytes(hardware.storage_free_bytes)} free where runs are written"
        )
    warnings.append(f"extreme: {EXTREME_RISKS}")
    return suggestions, warnings


# ----------------------------------------------------------------------------- output


def generated_toml(tier: dict[str, Any], source: str) -> str:
    share = tier["budget_share"]
    header = [
        f"# Generated by `trm analyze {source} --generate-configs` for the {tier['mode']} tier:",
        f"# target {tier['target_fraction']:.0%} of the {format_bytes(tier['budget_bytes'] or 0)}"
        f" memory budget; predicted peak {format_bytes(tier['predicted_bytes'])}"
        + (f" ({share:.0%})." if share is not None else "."),
        f"# Run it with: trm run THIS_FILE --mode {tier['mode']}",
    ]
    header += [
        f"# changed {c['key']}: {c['old']} -> {c['new']} ({c['reason']})" for c in tier["changes"]
    ]
    return "\n".join(header) + "\n\n" + spec_to_toml(tier["spec"])


def write_configs(directory: Path, tiers: list[dict[str, Any]], source: str) -> list[Path]:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrmError(
            f"--generate-configs {directory}: cannot create it ({exc.strerror})"
        ) from exc
    written = []
    for tier in tiers:
        spec = attrs.evolve(tier["spec"], name=f"{tier['spec'].name}-{tier['mode']}")
        tier = {**tier, "spec": spec}
        path = directory / f"{spec.name}.toml"
        path.write_text(generated_toml(tier, source), encoding="utf-8")
        written.append(path)
    return written


PROFILE_ROWS = (
    ("OS", "os", ""),
    ("Python", "python", ""),
    ("torch", "torch_version", ""),
    ("MKL", "mkl_available", ""),
    ("oneDNN", "onednn_available", ""),
    ("Apple Accelerate", "accelerate_available", ""),
    ("CPU vendor", "cpu_vendor", ""),
    ("CPU model", "cpu_model", ""),
    ("arch", "cpu_arch", ""),
    ("cores (physical/logical)", None, ""),
    ("base / max MHz", None, ""),
    ("L1d / L2 / L3", None, ""),
    ("vector features", "cpu_features", ""),
    ("native bf16", "cpu_native_bf16", ""),
    ("memory total", "memory_total_bytes", "bytes"),
    ("memory available", "memory_available_bytes", "bytes"),
    ("swap total / free", None, ""),
    ("OS reserve", "memory_reserve_bytes", "bytes"),
    ("usable budget", "memory_budget_bytes", "bytes"),
    ("CUDA GPUs", "cuda_devices", ""),
    ("Apple GPU (MPS)", "mps_available", ""),
    ("storage free", "storage_free_bytes", "bytes"),
    ("storage path", "storage_path", ""),
    ("on battery", "on_battery", ""),
)


def print_profile(hardware: HardwareProfile) -> None:
    h = hardware
    special = {
        "cores (physical/logical)": f"{describe(h.physical_cores)} / {describe(h.logical_cores)}",
        "base / max MHz": f"{describe(h.cpu_base_mhz)} / {describe(h.cpu_max_mhz)}",
        "L1d / L2 / L3": " / ".join(
            describe(v, "bytes") for v in (h.cache_l1d_bytes, h.cache_l2_bytes, h.cache_l3_bytes)
        ),
        "swap total / free": f"{describe(h.swap_total_bytes, 'bytes')} / "
        f"{describe(h.swap_free_bytes, 'bytes')}",
    }
    print("Hardware profile")
    for label, field_name, unit in PROFILE_ROWS:
        value = special[label] if field_name is None else describe(getattr(h, field_name), unit)
        print(f"  {label:<26} {value}")
    for gpu in h.gpus or ():
        print(
            f"  GPU {gpu.index:<22} {describe(gpu.name)}, "
            f"{describe(gpu.memory_total_bytes, 'bytes')}"
            f", sm {describe(gpu.compute_capability)}, bf16 {describe(gpu.bf16)}, "
            f"{describe(gpu.temperature_c, ' C')}, {describe(gpu.power_w, ' W')}"
        )
    for speed in h.device_speeds or ():
        print(
            f"  measured {speed.device:<17} fp32 {describe(speed.matmul_fp32_gflops)} GFLOP/s, "
            f"bf16 {describe(speed.matmul_bf16_gflops)} GFLOP/s, memory "
            f"{describe(speed.memory_bandwidth_gb_per_s)} GB/s"
        )
    if h.disk_write_mb_per_s is not None:
        print(f"  {'disk write':<26} {h.disk_write_mb_per_s:.0f} MB/s")


def print_tiers(spec: RunSpec, tiers: list[dict[str, Any]]) -> None:
    print(f"\nTiers for {spec.name} (global batch {spec.train.global_batch_size})")
    print(
        f"  {'tier':<13}{'micro':>6}{'accum':>6}  {'precision':<9}{'peak memory':>22}"
        f"{'samples/s':>11}{'finish':>11}"
    )
    for t in tiers:
        share = f"{t['budget_share']:.0%}" if t["budget_share"] is not None else "?"
        memory = f"{format_bytes(t['predicted_bytes'])} ({share})"
        rate = f"{t['samples_per_s']:.1f}" if t["samples_per_s"] else "unknown"
        print(
            f"  {t['mode']:<13}{t['micro_batch_size']:>6}{t['accumulation']:>6}  "
            f"{t['precision']:<9}{memory:>22}{rate:>11}{format_duration(t['time_to_finish_s']):>11}"
        )
    print("  samples/s is at the measured matmul peak (an upper bound; `trm bench` measures runs)")


def tier_document(tier: dict[str, Any]) -> dict[str, Any]:
    document = {k: v for k, v in tier.items() if k != "spec"}
    document["spec_name"] = tier["spec"].name
    return document


def run(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    hardware = detect_hardware(pm)
    if args.benchmark:
        from trm.machine_benchmark import run_benchmark

        if not args.json:
            info("measuring matmul, memory bandwidth and disk speed (a few seconds) …")
        speeds, disk, cache = run_benchmark(hardware, Path("runs"))
        hardware = attrs.evolve(hardware, device_speeds=speeds, disk_write_mb_per_s=disk)
        if not args.json:
            info(f"cached in {cache}")
    best = max(
        (s.matmul_bf16_gflops or s.matmul_fp32_gflops or 0.0 for s in hardware.device_speeds or ()),
        default=None,
    )
    if best is None:
        probe = "bf16" if hardware.cpu_native_bf16 else "fp32"
        best, _ = device_peak_gflops(hardware, "cpu", probe)
    score, meaning = performance_score(best)
    document: dict[str, Any] = {
        "profile": profile_to_dict(hardware),
        "performance_score": score,
        "performance_meaning": meaning,
        "best_matmul_gflops": best,
    }
    if args.profile_only:
        if args.json:
            print_json(document)
        else:
            print_profile(hardware)
            print(f"\nPerformance score {describe(score)}: {meaning}")
        return 0

    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    runtime = choose_runtime(pm, spec, hardware)
    estimate = estimate_memory(pm, spec, hardware, runtime, log=None if args.json else info)
    from trm.prepare import dataset_shape

    shape = dataset_shape(pm, spec)
    tiers = plan_tiers(pm, spec, hardware, estimate, shape)
    suggestions, warnings = advice(hardware, tiers, estimate)
    written = (
        write_configs(args.generate_configs, tiers, args.spec) if args.generate_configs else []
    )
    document.update(
        spec=spec.name,
        tiers=[tier_document(t) for t in tiers],
        suggestions=suggestions,
        warnings=warnings,
        generated_configs=[str(p) for p in written],
    )
    if args.json:
        print_json(document)
        return 0
    print_profile(hardware)
    print(f"\nPerformance score {describe(score)}: {meaning}")
    print_tiers(spec, tiers)
    for tier in tiers:
        for c in tier["changes"]:
            print(f"  {tier['mode']}: {c['key']} {c['old']} -> {c['new']} ({c['reason']})")
    if suggestions:
        print("\nSuggestions")
        for text in suggestions:
            print(f"  - {text}")
    print("\nWarnings")
    for text in warnings:
        print(f"  - {text}")
    for path in written:
        print(f"wrote {path}")
    return 0
