"""Training speed of trm on this machine: `trm bench` over a set of specs and plugin choices.

Usage: python benchmarks/bench.py [--specs sudoku-extreme-mlp,sudoku-extreme-att]
[--plugins-variants ",mkl"] [--steps 3] [--warmup 2] [--batch N] [--repeat 1] [--json]
[--markdown] [--from-json FILE]. Each run is a fresh `trm bench SPEC --json` process (so the
mkl plugin's thread environment takes effect before torch loads). Prints a table, one JSON
document with --json, or table rows for docs/performance.md with --markdown; --from-json
prints the table of a document an earlier --json run saved, without measuring again.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from typing import Any

from provenance import provenance
from tables import print_rows

COLUMNS = (
    ("spec", "spec", "{}"),
    ("plugins", "plugins", "{}"),
    ("precision", "precision", "{}"),
    ("batch", "batch_size", "{}"),
    ("samples/s", "samples_per_s", "{:.3f}"),
    ("GFLOP/sample", "gflop_per_sample", "{:.2f}"),
    ("GFLOP/s", "achieved_gflops", "{:.1f}"),
    ("peak GFLOP/s", "peak_gflops", "{:.1f}"),
    ("MFU", "mfu", "{:.3f}"),
    ("plain samples/s", "plain_samples_per_s", "{:.3f}"),
    ("plain MFU fp32", "plain_mfu_fp32", "{:.3f}"),
    ("trm/plain", "speedup_vs_plain", "{:.2f}"),
    ("other load", "other_load_trm", "{:.0%}"),
)


def run_one(spec: str, plugins: str, args: argparse.Namespace) -> dict[str, Any]:
    """One `trm bench` process; its JSON report plus the variant's names."""
    command = [sys.executable, "-m", "trm", "bench", spec, "--json"]
    command += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.batch:
        command += ["--batch", str(args.batch)]
    if plugins:
        command += ["--plugins", plugins]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"trm bench {spec} --plugins {plugins or '-'} failed")
    report = json.loads(done.stdout)
    report["plugins"] = plugins or "default"
    report["gflop_per_sample"] = report["flops_per_sample"] / 1e9
    return report


def cell(report: dict[str, Any], key: str, pattern: str) -> str:
    value = report.get(key)
    return "-" if value is None else pattern.format(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", default="sudoku-extreme-mlp,sudoku-extreme-att")
    parser.add_argument(
        "--plugins-variants",
        default=",mkl",
        help="comma-separated --plugins values to compare; empty means the defaults",
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=0, help="samples per step (0: trm's default)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant (noisy machines)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--markdown", action="store_true", help="print markdown table rows")
    parser.add_argument("--from-json", metavar="FILE", help="table of a saved --json document")
    args = parser.parse_args()

    if args.from_json:
        with open(args.from_json, encoding="utf-8") as saved:
            print_table(json.load(saved)["runs"], args.markdown)
        return
    reports = []
    for spec in [s for s in args.specs.split(",") if s]:
        for plugins in args.plugins_variants.split(","):
            for _ in range(args.repeat):
                print(f"bench: {spec} --plugins {plugins or 'default'}", file=sys.stderr)
                reports.append(run_one(spec, plugins.strip(), args))
    if args.json:
        machine = {"machine": platform.machine(), "processor": platform.processor()}
        document = {"provenance": provenance(), "machine": machine, "runs": reports}
        print(json.dumps(document, indent=2))
        return
    print_table(reports, args.markdown)


def print_table(reports: list[dict[str, Any]], markdown: bool) -> None:
    """One row per report: aligned columns, or markdown table rows when ``markdown``."""
    headers = [title for title, _, _ in COLUMNS]
    rows = [[cell(r, key, pattern) for _, key, pattern in COLUMNS] for r in reports]
    print_rows(headers, rows, markdown)


if __name__ == "__main__":
    main()
