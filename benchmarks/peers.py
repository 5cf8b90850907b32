"""trm's training step against its peers, on this machine, in one run: samples/s, GFLOP/s,
MFU against the same measured GEMM peak, and the ratio trm / peer.

Usage: python benchmarks/peers.py [--reference PATH] [--shapes a,b,c] [--peers a,b] [--batch N]
[--rounds 2] [--steps 1] [--warmup 1] [--threads N] [--set KEY=VALUE ...] [--json] [--out FILE]
[--from-json FILE]

The peers (``benchmarks/peer_steps.py`` says how each is built and driven):

- ``official``: the official TinyRecursiveModels model and ACT loss head, imported at run
  time from the checkout ``--reference PATH`` names (``pip install -e '.[peers]'`` for what it
  imports), driven as its pretrain.py drives them, bf16 and ``torch.compile``'d as it ships,
  AdamW in place of its CUDA-only AdamATan2;
- ``lucidrains``: ``tiny-recursive-model`` from PyPI (in the ``peers`` extra) at the closest
  configuration it offers, fp32 eager as it ships.

A peer that is not given or not installed is a row that says so. Shapes (trm's specs):
``sudoku-extreme-mlp`` (the paper's Sudoku MLP, 81 tokens), ``maze-hard-att`` (the attention
shape, 900 tokens, as ARC's) and ``quickstart``. Every implementation trains the same batch
(:data:`CPU_BATCH` / :data:`CUDA_BATCH` per shape, or ``--batch``) of the same data (a few
puzzles built by the spec's source).

How it times: the peers are built and warmed up (compilation happens there), then trm's real
loop (:class:`trm.loop.Trainer`, as ``trm bench``) trains ``warmup + rounds × steps`` steps;
after trm's warm-up and after each window of ``steps`` trm steps, a plugin on ``on_step``
runs a window of ``steps`` steps of each peer. So the windows alternate trm, official,
lucidrains, trm, … in one process, and a burst of load on a shared machine falls on all of
them alike. trm's window is the wall time between its ``on_step`` calls, the peers' windows
left out. The GEMM peak (:mod:`trm.plugins.measure.peak`, at trm's precision) is measured before and
after, the higher kept; every row's MFU is against it. FLOPs per sample: trm's analytic count
(:mod:`trm.measure.flops`) for trm and the official model (the same network); lucidrains'
network differs, so its own forward + backward FLOPs are counted
(``torch.utils.flop_counter``). The document records the load (``uptime``) before and after
each shape; on a shared machine the figures move with it.

The peers' windows run inside trm's loop, so at trm's thread count (``--threads N`` sets it
for all; on a CPU shared past its cores, one thread each avoids the collapse of OpenMP
threads waiting on descheduled siblings). Without ``--out`` nothing is written; ``--out FILE``
is rewritten after each shape.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tables, provenance, peer_steps

import torch
from peer_steps import Batches, PeerStep, lucidrains_step, official_step
from provenance import load, provenance
from tables import print_rows

from trm.data.shape import read_shape
from trm.errors import TrmError
from trm.hookspecs import hookimpl
from trm.loop import Trainer
from trm.measure.flops import model_flops
from trm.measure.loop_timing import BENCH_OFF, bench_spec, small_data_spec
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import choose_runtime, detect_hardware
from trm.plugin_manager import load_plugins
from trm.plugins.measure.peak import measure_gemm_peak
from trm.spec import apply_overrides, load_spec, resolve_spec_path

SHAPES = ("sudoku-extreme-mlp", "maze-hard-att", "quickstart")
PEERS = ("official", "official-fp32", "lucidrains")
# The peers run unless --peers names others: official-fp32 (the official code with its own
# arch.forward_dtype = float32) is asked for where bf16 is emulated (a CPU without AVX-512 BF16
# or AMX), to compare like with like as well as with the code as it ships.
DEFAULT_PEERS = ("official", "lucidrains")
# Samples a step per shape, the same for every implementation. 32 on a CPU, but the
# 900-token shape at 4: a step of 32 takes a minute or more on a shared 2-core CPU, which the
# default run (about 10 minutes for all three shapes) cannot afford: time, not memory.
CPU_BATCH = {"sudoku-extreme-mlp": 32, "maze-hard-att": 4, "quickstart": 32}
CUDA_BATCH = {"sudoku-extreme-mlp": 256, "maze-hard-att": 64, "quickstart": 128}
DOCUMENT_KIND = "trm-peers"


class Alternator:
    """An in-process plugin: times trm's windows and runs the peers' windows between them."""

    def __init__(self, peers: list[PeerStep], warmup: int, steps: int, sync: Any) -> None:
        self.peers, self.warmup, self.steps, self.sync = peers, warmup, steps, sync
        self.count = 0
        self.window_start = 0.0
        self.trm_warmup_s: list[float] = []
        self.windows_s: dict[str, list[float]] = {"trm": [], **{p.name: [] for p in peers}}
        self.order: list[str] = []
        self.load_fraction: list[float] = []

    @hookimpl
    def on_train_start(self) -> None:
        self.window_start = time.perf_counter()

    @hookimpl
    def on_step(self) -> None:
        self.count += 1
        now = time.perf_counter()
        if self.count <= self.warmup:
            self.trm_warmup_s.append(now - self.window_start)
            self.window_start = now
            return
        if (self.count - self.warmup) % self.steps:
            return
        self.windows_s["trm"].append(now - self.window_start)
        self.order.append("trm")
        for peer in self.peers:
            self.sync()
            started = time.perf_counter()
            for _ in range(self.steps):
                peer.step()
            self.sync()
            self.windows_s[peer.name].append(time.perf_counter() - started)
            self.order.append(peer.name)
        self.window_start = time.perf_counter()


def peer_rows_unavailable(args: argparse.Namespace) -> dict[str, str]:
    """Peers that cannot run here, each with why (a row that says so)."""
    missing: dict[str, str] = {}
    if any(p.startswith("official") for p in args.peers):
        if args.reference is None:
            missing["official"] = (
                "not given (--reference PATH names a TinyRecursiveModels checkout)"
            )
        else:
            try:
                from peer_steps import import_official

                import_official(args.reference)
            except ImportError as exc:
                missing["official"] = f"not importable from {args.reference}: {exc}"
        for variant in args.peers:
            if variant.startswith("official") and "official" in missing:
                missing[variant] = missing["official"]
    if "lucidrains" in args.peers:
        try:
            import tiny_recursive_model  # noqa: F401
        except ImportError:
            missing["lucidrains"] = (
                "not installed (pip install tiny-recursive-model, or -e '.[peers]')"
            )
    return missing


def measure_shape(name: str, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    """Every implementation on spec ``name``, alternated; the shape's part of the document."""
    spec = load_spec(resolve_spec_path(name))
    if args.set:
        spec = apply_overrides(spec, args.set)
    if args.threads:
        spec = apply_overrides(spec, [f"runtime.threads={args.threads}"])
        torch.set_num_threads(args.threads)  # the peers' warm-up; trm's loop sets the same
    pm = load_plugins(list(BENCH_OFF))
    runtime = choose_runtime(pm, spec, detect_hardware(pm))
    device = runtime.device
    cuda = device.startswith("cuda")
    batch = args.batch or (CUDA_BATCH if cuda else CPU_BATCH)[name]
    precision = runtime.precision if runtime.autocast_dtype is not None else "fp32"
    total = args.warmup + args.rounds * args.steps
    load_before = load()
    root = Path(tempfile.mkdtemp(prefix="trm-peers-"))

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    try:
        data_dir = ensure_dataset(pm, small_data_spec(spec, pm, max(batch, 8)), root, log)
        shape = read_shape(data_dir, spec.data.train_split)
        flops = model_flops(spec.arch, shape.seq_len, shape.vocab_size).per_sample
        log(f"{name}: the {precision} GEMM peak of {device}")
        peaks = [measure_gemm_peak(device, precision, args.peak_seconds, runtime.backend)]
        unavailable = peer_rows_unavailable(args)
        peers: list[PeerStep] = []
        warmups: dict[str, list[float]] = {}
        failed: dict[str, str] = {}
        for peer_name in args.peers:
            if peer_name in unavailable:
                continue
            log(f"{name}: building and warming up {peer_name} ({args.warmup} steps of {batch})")
            try:
                batches = Batches(spec, data_dir, batch, device)
                if peer_name == "official":
                    peer = official_step(args.reference, spec, shape, batches, device, total)
                elif peer_name == "official-fp32":
                    peer = official_step(
                        args.reference, spec, shape, batches, device, total, forward_dtype="float32"
                    )
                else:
                    peer = lucidrains_step(spec, shape, batches, device)
                seconds = []
                for _ in range(args.warmup):
                    started = time.perf_counter()
                    peer.step()
                    seconds.append(time.perf_counter() - started)
            except Exception as exc:  # a peer that breaks is a row that says so
                failed[peer_name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                continue
            warmups[peer_name] = seconds
            peers.append(peer)
        log(
            f"{name}: trm's loop, {args.warmup} warm-up + {args.rounds} x {args.steps} steps, "
            f"each window followed by the peers'"
        )
        alternator = Alternator(peers, args.warmup, args.steps, sync)
        trm_pm = load_plugins(list(BENCH_OFF), extra_modules=[("peers-alternator", alternator)])
        spec_b = bench_spec(spec, batch, total)
        (root / "trm").mkdir()
        Trainer(spec_b, runtime, trm_pm, root / "trm", data_dir, log, resume="never").fit()
        peaks.append(measure_gemm_peak(device, precision, args.peak_seconds, runtime.backend))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    peak = max(p.gflops for p in peaks)

    def rates(windows: list[float]) -> list[float]:
        return [round(batch * args.steps / w, 4) for w in windows]

    rows: list[dict[str, Any]] = []
    trm_windows = alternator.windows_s["trm"]
    trm_rate = batch * args.steps * len(trm_windows) / sum(trm_windows)
    rows.append(
        {
            "implementation": "trm",
            "status": "measured",
            "precision": runtime.precision,
            "compiled": runtime.compile,
            "samples_per_s": round(trm_rate, 4),
            "window_samples_per_s": rates(trm_windows),
            "warmup_s": [round(s, 2) for s in alternator.trm_warmup_s],
            "gflop_per_sample": round(flops / 1e9, 4),
            "achieved_gflops": round(trm_rate * flops / 1e9, 2),
            "mfu": round(trm_rate * flops / 1e9 / peak, 4),
            "trm_over_peer": None,
            "notes": list(runtime.notes),
        }
    )
    for peer_name in args.peers:
        if peer_name in unavailable or peer_name in failed:
            why = unavailable.get(peer_name) or failed[peer_name]
            rows.append({"implementation": peer_name, "status": why})
            continue
        peer = next(p for p in peers if p.name == peer_name)
        windows = alternator.windows_s[peer_name]
        rate = batch * args.steps * len(windows) / sum(windows)
        rows.append(
            {
                "implementation": peer_name,
                "status": "measured",
                "precision": peer.precision,
                "compiled": peer.compiled,
                "samples_per_s": round(rate, 4),
                "window_samples_per_s": rates(windows),
                "warmup_s": [round(s, 2) for s in warmups[peer_name]],
                "gflop_per_sample": round(peer.flops_per_sample / 1e9, 4),
                "achieved_gflops": round(rate * peer.flops_per_sample / 1e9, 2),
                "mfu": round(rate * peer.flops_per_sample / 1e9 / peak, 4),
                "trm_over_peer": round(trm_rate / rate, 3),
                "trm_over_peer_best_windows": best_windows_ratio(
                    rates(trm_windows), rates(windows)
                ),
                "notes": list(peer.notes),
            }
        )
    return {
        "shape": name,
        "device": device,
        "threads": runtime.threads,
        "batch_size": batch,
        "seq_len": shape.seq_len,
        "rounds": args.rounds,
        "steps_per_window": args.steps,
        "warmup_steps": args.warmup,
        "window_order": alternator.order,
        "peak_precision": precision,
        "peak_gflops": round(peak, 1),
        "peak_windows_gflops": [round(p.gflops, 1) for p in peaks],
        "load_before": load_before,
        "load_after": load(),
        "rows": rows,
    }


HEADERS = (
    "shape",
    "batch",
    "implementation",
    "precision",
    "compiled",
    "samples/s",
    "GFLOP/sample",
    "GFLOP/s",
    "MFU",
    "trm/peer",
    "trm/peer, best windows",
)


def table_rows(document: dict[str, Any]) -> list[list[str]]:
    """One row per shape and implementation; an unavailable peer's row says why. trm/peer is
    the ratio of the rates over all windows; "best windows" that of each one's fastest window
    (on a shared machine the least disturbed one)."""

    def fmt(value: Any, pattern: str) -> str:
        return "-" if value is None else pattern.format(value)

    out = []
    for shape in document["shapes"]:
        trm_windows = shape["rows"][0].get("window_samples_per_s")
        for row in shape["rows"]:
            head = [shape["shape"], str(shape["batch_size"]), row["implementation"]]
            if row["status"] != "measured":
                out.append([*head, row["status"], "", "", "", "", "", "", ""])
                continue
            best = None
            if row["implementation"] != "trm":
                best = best_windows_ratio(trm_windows, row.get("window_samples_per_s"))
            out.append(
                [
                    *head,
                    row["precision"],
                    "yes" if row["compiled"] else "no",
                    fmt(row["samples_per_s"], "{:.2f}"),
                    fmt(row["gflop_per_sample"], "{:.3f}"),
                    fmt(row["achieved_gflops"], "{:.1f}"),
                    fmt(row["mfu"], "{:.3f}"),
                    fmt(row["trm_over_peer"], "{:.2f}"),
                    fmt(best, "{:.2f}"),
                ]
            )
    return out


def best_windows_ratio(
    trm_windows: list[float] | None, windows: list[float] | None
) -> float | None:
    """trm's fastest window over the peer's fastest (on a shared machine, the least disturbed
    of each); None without windows."""
    if not trm_windows or not windows or not max(windows):
        return None
    return round(max(trm_windows) / max(windows), 3)


def write(document: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    partial.replace(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a TinyRecursiveModels checkout")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated specs")
    parser.add_argument(
        "--peers",
        default=",".join(DEFAULT_PEERS),
        help=f"comma-separated peers, of {', '.join(PEERS)}",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a spec override for trm (and the data), as `trm run --set`; repeatable",
    )
    parser.add_argument("--batch", type=int, default=0, help="samples a step (0: per shape)")
    parser.add_argument("--rounds", type=int, default=2, help="windows of each implementation")
    parser.add_argument("--steps", type=int, default=1, help="steps in one window")
    parser.add_argument("--warmup", type=int, default=1, help="untimed first steps of each")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads for every implementation (0: trm's choice, which the peers share)",
    )
    parser.add_argument("--peak-seconds", type=float, default=1.0, help="per GEMM-peak probe")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--out", type=Path, help="write the JSON document there")
    parser.add_argument("--from-json", type=Path, help="print the table of a saved document")
    parser.add_argument("--markdown", action="store_true", help="the table as markdown")
    args = parser.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in args.peers if p not in PEERS]
    if unknown:
        raise TrmError(f"--peers: unknown {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    for name, value in (("--rounds", args.rounds), ("--steps", args.steps)):
        if value < 1:
            raise TrmError(f"{name} must be at least 1, got {value}")
    if args.warmup < 1:
        raise TrmError(
            f"--warmup must be at least 1 (compilation happens there), got {args.warmup}"
        )
    if args.threads < 0:
        raise TrmError(f"--threads must be at least 0 (0: trm's choice), got {args.threads}")
    if args.batch < 0:
        raise TrmError(f"--batch must be positive (0: per shape), got {args.batch}")
    if args.reference is not None and not args.reference.is_dir():
        raise TrmError(
            f"--reference {args.reference}: no such folder; give a checkout of TinyRecursiveModels"
        )
    for name in args.shapes:
        resolve_spec_path(name)  # a TrmError naming the spec when it is unknown
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except TrmError as exc:
        print(f"trm: error: {exc}", file=sys.stderr)
        return 2
    if args.from_json:
        document = json.loads(args.from_json.read_text())
        print_rows(HEADERS, table_rows(document), markdown=args.markdown)
        return 0

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    document: dict[str, Any] = {
        "kind": DOCUMENT_KIND,
        "provenance": provenance(),
        "torch": torch.__version__,
        "reference": str(args.reference) if args.reference else None,
        "trm_overrides": list(args.set),
        "shapes": [],
        "complete": False,
    }
    for name in args.shapes:
        document["shapes"].append(measure_shape(name, args, log))
        if args.out:
            write(document, args.out)
    document["complete"] = True
    document["load_end"] = load()
    if args.out:
        write(document, args.out)
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_rows(HEADERS, table_rows(document), markdown=args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
