"""Where a benchmark document's figures came from: the command, the commit, the machine
(``lscpu`` model name and cores, the GPU where there is one), the date and the load
(``uptime``), for the scripts that run as ``python benchmarks/NAME.py``."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _run(*command: str) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> str:
    """The checkout's commit, ``+dirty`` when files differ from it."""
    head = _run("git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = _run("git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    """The CPU as ``lscpu`` names it, its logical cores, and the GPUs torch sees."""
    model = ""
    for line in _run("lscpu").splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
            break
    found: dict[str, Any] = {
        "cpu": model or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    try:
        import torch

        if torch.cuda.is_available():
            found["gpus"] = [
                torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
            ]
    except ImportError:  # pragma: no cover - trm needs torch
        pass
    return found


def load() -> dict[str, Any]:
    """The 1-minute load average and ``uptime``'s line, now."""
    return {"loadavg_1min": round(os.getloadavg()[0], 2), "uptime": _run("uptime")}


def provenance() -> dict[str, Any]:
    """command, commit, machine, date (UTC) and the load at the start."""
    return {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_start": load(),
    }
