"""Start-up of ``import trm`` and ``trm --help`` at two commits, in alternating rounds.

    python benchmarks/import_time.py --base REF [--new REF] [--rounds N] [--out FILE]

Each commit is installed (``pip install --no-deps --target``, not editable) into a folder of
its own from ``git archive``; every sample is a fresh interpreter of this Python with that
folder first on ``PYTHONPATH``, timed from start to exit. The rounds alternate base, new,
base, new… so that the load of a shared machine falls on both alike. Also records, once per
commit, how many modules each imports and whether Optuna, matplotlib or safetensors is among
them. Prints one JSON document (with its provenance) and writes it to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import REPO, provenance

HEAVY = ("optuna", "matplotlib", "safetensors", "torch")
PROGRAMS = {
    "import trm": "import trm",
    "trm --help": (
        "import sys\nfrom trm.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    ),
}
PROBE = "\nimport sys\nprint(len(sys.modules), [m for m in {heavy!r} if m in sys.modules])"


def install(ref: str, into: Path) -> Path:
    """``ref`` installed into ``into/site``; its folder."""
    source, site = into / "src", into / "site"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
        cwd=into,
        capture_output=True,
    )
    return site


def _commit(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", ref], capture_output=True, text=True, check=True
    ).stdout.strip()


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    env["PYTHONPATH"] = str(site)
    return env


def sample_s(site: Path, code: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one fresh interpreter running ``code``;
    the CPU seconds are what a loaded machine disturbs least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code], env=_env(site), check=True, capture_output=True, cwd=site
    )
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def modules(site: Path, code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code + PROBE.format(heavy=HEAVY)],
        env=_env(site),
        check=True,
        capture_output=True,
        text=True,
        cwd=site,
    )
    count, heavy = done.stdout.strip().splitlines()[-1].split(" ", 1)
    return {"modules": int(count), "heavy_imported": ast.literal_eval(heavy)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit before (e.g. main)")
    parser.add_argument("--new", default="HEAD", help="the commit after (default HEAD)")
    parser.add_argument("--rounds", type=int, default=10, help="samples of each (default 10)")
    parser.add_argument("--out", type=Path, help="also write the document here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sites = {
            name: install(ref, Path(tmp) / name)
            for name, ref in (("base", args.base), ("new", args.new))
        }
        for site in sites.values():  # warm the page cache and the bytecode of both
            for code in PROGRAMS.values():
                sample_s(site, code)
        walls: dict[str, dict[str, list[float]]] = {p: {"base": [], "new": []} for p in PROGRAMS}
        cpus: dict[str, dict[str, list[float]]] = {p: {"base": [], "new": []} for p in PROGRAMS}
        for _ in range(args.rounds):
            for program, code in PROGRAMS.items():
                for name in ("base", "new"):
                    wall_s, cpu_s = sample_s(sites[name], code)
                    walls[program][name].append(round(wall_s, 4))
                    cpus[program][name].append(round(cpu_s, 4))
        results = {
            program: {
                name: {
                    "median_wall_s": round(statistics.median(samples), 4),
                    "median_cpu_s": round(statistics.median(cpus[program][name]), 4),
                    "wall_s": samples,
                    "cpu_s": cpus[program][name],
                    **modules(sites[name], PROGRAMS[program]),
                }
                for name, samples in by_commit.items()
            }
            for program, by_commit in walls.items()
        }
    document = {
        "what": "wall and CPU time of a fresh interpreter running `import trm` / `trm --help`, "
        "base and new commits alternating",
        "base": args.base,
        "base_commit": _commit(args.base),
        "new": args.new,
        "new_commit": _commit(args.new),
        "rounds": args.rounds,
        "python": sys.version.split()[0],
        "results": results,
        "provenance": provenance(),
    }
    text = json.dumps(document, indent=2) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
