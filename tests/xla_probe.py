"""Runs of ``trm run`` on the xla backend, in this process, with PyTorch/XLA's own counters
read after every step — shared by tests/test_xla*.py and runnable by hand:

    PJRT_DEVICE=CPU python tests/xla_probe.py quickstart --max-steps 60 --set ...

prints one line per step: compilations so far, device-to-host transfers so far, the loss.
With ``PT_XLA_DEBUG_LEVEL=2`` set, PyTorch/XLA explains each compilation on stderr.

Imports torch_xla: only for the XLA venv (the tests importing this skip without it).
"""

from __future__ import annotations

import sys
from typing import Any

import torch_xla.debug.metrics as met
from attrs import define, field

from trm import hookimpl
from trm.api import training as run_cmd  # where `trm run` loads its plugins
from trm.cli.main import main


def compilations() -> int:
    """Graphs this process compiled or loaded compiled from the persistent cache so far
    (samples of the CompileTime metric plus the PersistentCacheHit counter)."""
    data = met.metric_data("CompileTime")
    compiled = int(data[0]) if data else 0
    return compiled + int(met.counter_value("PersistentCacheHit") or 0)


def host_transfers() -> int:
    """Device-to-host transfers in this process so far (samples of TransferFromDeviceTime:
    one per transfer call, however many tensors it moves)."""
    data = met.metric_data("TransferFromDeviceTime")
    return int(data[0]) if data else 0


def cpu_fallbacks() -> dict[str, int]:
    """Operators XLA could not lower and ran on the host (``aten::`` counters), by name."""
    return {
        name: int(met.counter_value(name) or 0)
        for name in met.counter_names()
        if name.startswith("aten::")
    }


@define
class StepCounts:
    """The counters right after one step's metrics row (``on_step``)."""

    step: int
    compilations: int
    host_transfers: int
    cpu_fallbacks: int
    loss: float


@define
class Recorder:
    """An in-process plugin that reads the counters after every step (``rows``) and after
    every evaluation (``evals``: the step and the device-to-host transfers so far)."""

    rows: list[StepCounts] = field(factory=list)
    evals: list[tuple[int, int]] = field(factory=list)

    @hookimpl
    def on_eval(self, state: Any, metrics: dict[str, float]) -> None:
        self.evals.append((int(metrics["step"]), host_transfers()))

    @hookimpl
    def on_step(self, state: Any, metrics: dict[str, float]) -> None:
        self.rows.append(
            StepCounts(
                int(metrics["step"]),
                compilations(),
                host_transfers(),
                sum(cpu_fallbacks().values()),
                metrics["loss"],
            )
        )


def run_recorded(args: list[str], monkeypatch: Any = None) -> tuple[int, Recorder]:
    """``trm run ARGS`` in this process with a :class:`Recorder` plugged in; (exit, recorder).
    ``monkeypatch`` (pytest's) undoes the patch after the test; without it the patch stays."""
    recorder = Recorder()
    real = run_cmd.load_plugins

    def with_recorder(names: Any, extra_modules: Any = (), **options: Any) -> Any:
        return real(names, extra_modules=[*extra_modules, ("xla-recorder", recorder)], **options)

    if monkeypatch is not None:
        monkeypatch.setattr(run_cmd, "load_plugins", with_recorder)
        code = main(["run", *args])
    else:
        run_cmd.load_plugins = with_recorder
        try:
            code = main(["run", *args])
        finally:
            run_cmd.load_plugins = real
    return code, recorder


if __name__ == "__main__":
    code, recorder = run_recorded(sys.argv[1:])
    for row in recorder.rows:
        print(
            f"step {row.step:4d}  compilations {row.compilations:3d}  "
            f"host transfers {row.host_transfers:5d}  host fallbacks {row.cpu_fallbacks:3d}  "
            f"loss {row.loss:.4f}"
        )
    print("fallbacks to the host:", cpu_fallbacks() or "none")
    print(met.short_metrics_report())
    sys.exit(code)
