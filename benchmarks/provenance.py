"""How a results document was made: the block every document in benchmarks/results/ carries
under ``"provenance"``, so that each figure the docs quote names its command, commit, machine,
date and load (tests/test_results_provenance.py checks the saved ones).

A benchmark that prints a document adds ``"provenance": provenance()`` to it.
"""

from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The keys of a provenance block; "machine" holds cpu_model, physical_cores, logical_cores.
KEYS = ("command", "commit", "machine", "date", "load_average")


def current_commit() -> str:
    """HEAD of this repository, with ``-dirty`` when tracked files differ from it; "unknown"
    outside a git checkout."""
    try:
        head = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def machine() -> dict[str, Any]:
    """The CPU as ``lscpu`` names it (its "Model name", /proc/cpuinfo's "model name") and its
    physical and logical cores, as trm's hardware profile reads them."""
    from trm.plugins.planning.system import detect

    profile = detect()
    return {
        "cpu_model": profile.cpu_model or "unknown",
        "physical_cores": profile.physical_cores,
        "logical_cores": profile.logical_cores,
    }


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """The provenance block of a document this process prints: the command as it was typed
    (``python benchmarks/NAME.py ARGS``; ``argv`` defaults to ``sys.argv``), the commit, the
    machine, the UTC date and time (ISO 8601) and the 1, 5 and 15-minute load averages at the
    time of the call (None where the OS has none)."""
    words = list(sys.argv if argv is None else argv)
    script = Path(words[0]) if words else Path("?")
    try:
        shown = script.resolve().relative_to(REPO)
    except ValueError:
        shown = script
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "command": shlex.join(["python", str(shown), *words[1:]]),
        "commit": current_commit(),
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": load,
    }


def load() -> dict[str, Any]:
    """The 1-minute load average and ``uptime``'s line, now (for documents that record the
    load at several points of a run)."""
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    except OSError:
        uptime = ""
    return {"loadavg_1min": round(os.getloadavg()[0], 2), "uptime": uptime.strip()}
