"""mkl (opt-in): Intel MKL / oneDNN on x86, Apple Accelerate on macOS: checks and thread env.

Switched on with ``--plugins mkl``. When the run is on the CPU it checks which BLAS this
torch build multiplies with (MKL and oneDNN on x86, Accelerate on macOS) and says so, and
sets the math libraries' thread environment, which they read only when torch loads: the
``trm`` command is re-launched once with it (see :mod:`trm.plugins.backends.launch_env`); as a
library it prints the ``export`` line instead. Everything it did is added to the runtime's
notices, which ``trm run`` and ``trm bench`` print at start.

Settings kept are only those measured to help (docs/performance.md has the numbers):
thread counts pinned to the backend's choice (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``MKL_DYNAMIC=FALSE`` so MKL never uses fewer; ``VECLIB_MAXIMUM_THREADS`` on macOS).
``OMP_WAIT_POLICY`` is left to the OpenMP default (spin briefly, then sleep): on a quiet
machine both ``PASSIVE`` and ``ACTIVE`` made training steps slower (docs/performance.md).
Thread pinning (``OMP_PROC_BIND``/``OMP_PLACES``) did not help and is not set.
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Generator

import attrs
import torch
from attrs import frozen

from trm import hookimpl
from trm.plugins.backends.launch_env import ensure_env
from trm.runtime import RuntimeChoice

ACTIVATION = "opt-in"


@frozen
class BlasReport:
    """Which math libraries this torch build uses; versions None where not reported."""

    blas: str  # "mkl", "accelerate", "openblas", … or "unknown"
    mkl_version: str | None
    onednn_version: str | None
    onednn_enabled: bool

    def describe(self) -> str:
        parts = [f"BLAS {self.blas}" + (f" {self.mkl_version}" if self.mkl_version else "")]
        if self.onednn_version:
            state = "on" if self.onednn_enabled else "off"
            parts.append(f"oneDNN {self.onednn_version} ({state})")
        return ", ".join(parts)


def blas_report(config: str | None = None) -> BlasReport:
    """Read ``torch.__config__.show()`` (or ``config``) for the BLAS and oneDNN in use."""
    text = torch.__config__.show() if config is None else config
    blas = re.search(r"BLAS_INFO=([\w.+-]+)", text)
    mkl = re.search(r"Math Kernel Library Version ([\w.]+)", text)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v?([\d.]+)", text)
    mkldnn = getattr(torch.backends, "mkldnn", None)
    enabled = bool(mkldnn is not None and mkldnn.is_available() and mkldnn.enabled)
    return BlasReport(
        blas=blas.group(1).lower() if blas else "unknown",
        mkl_version=mkl.group(1) if mkl else None,
        onednn_version=onednn.group(1) if onednn else None,
        onednn_enabled=enabled,
    )


def expected_blas(system: str | None = None, machine: str | None = None) -> str | None:
    """The library this plugin is for on this platform: accelerate, mkl, or None (other CPUs)."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    if system == "Darwin":
        return "accelerate"
    if machine in ("x86_64", "amd64", "i686", "x86"):
        return "mkl"
    return None


def thread_env(threads: int, blas: str) -> dict[str, str]:
    """The thread environment for ``threads`` threads with ``blas``."""
    n = str(threads)
    env = {"OMP_NUM_THREADS": n}
    if blas == "mkl":
        env.update({"MKL_NUM_THREADS": n, "MKL_DYNAMIC": "FALSE"})
    elif blas == "accelerate":
        env["VECLIB_MAXIMUM_THREADS"] = n
    return env


def check_and_configure(choice: RuntimeChoice) -> list[str]:
    """The mkl plugin's work for a CPU run: checks, thread environment; returns notices."""
    report = blas_report()
    wanted = expected_blas()
    if wanted is None:
        return [f"mkl: nothing to do on {platform.machine()} ({report.describe()})"]
    notes = [f"mkl: torch multiplies with {report.describe()}"]
    if report.blas != wanted:
        notes.append(
            f"mkl: this torch build does not use {wanted} for BLAS; the mkl plugin changes "
            "nothing (install the official torch wheel for this platform)"
        )
        return notes
    if wanted == "mkl" and not report.onednn_enabled:
        torch.backends.mkldnn.enabled = True
        notes.append("mkl: oneDNN was switched off; switched it on (bf16 products use it)")
    env = thread_env(choice.threads, wanted)
    notes.extend(ensure_env(env, "mkl", f"{choice.threads} math-library threads"))
    return notes


@hookimpl(wrapper=True)
def configure_runtime() -> Generator[None, RuntimeChoice | None, RuntimeChoice | None]:
    """Wraps the backend's answer: for a CPU run, check the BLAS and set its environment."""
    choice = yield
    if choice is None or not choice.device.startswith("cpu"):
        return choice
    notes = check_and_configure(choice)
    return attrs.evolve(choice, notes=(*choice.notes, *notes))


if sys.platform == "darwin":  # pragma: no cover - documented here for readers on macOS
    __doc__ += "\nOn macOS the BLAS is Apple Accelerate (AMX units on Apple silicon)."
