"""The hooks trm calls. Each docstring is the hook's contract.

A plugin implements any of these with ``@trm.hookimpl`` on a module-level function of the same
name; as pluggy allows, an implementation may take only the arguments it uses. Who calls each
hook and when is written below; the order of a run is: detect_hardware, configure_runtime,
estimate_memory, adapt_config, register_data_sources, load_checkpoint, on_train_start,
then per step on_step (and on_out_of_memory, on_thermal_event, save_checkpoint as they
arise), on_eval, and on_train_end.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from trm.control import ThermalEvent, TrainControl
    from trm.data.shape import DatasetShape
    from trm.data.source import DataSource
    from trm.hardware import HardwareProfile
    from trm.memory import MemoryEstimate, MemoryItem
    from trm.runtime import RuntimeChoice
    from trm.spec import RunSpec
    from trm.state import TrainState

PROJECT_NAME = "trm"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def detect_hardware() -> HardwareProfile | None:
    """Report the part of the machine this plugin can see.

    Called once at the start of ``trm run``, ``trm analyze``, ``trm estimate`` and ``trm bench``.
    Return a HardwareProfile with only the fields this plugin knows set; leave the rest None.
    Never guess: an unknown value stays None and is shown as "unknown". The core merges all
    parts; for a field set by several plugins the first registered wins.
    """


@hookspec(firstresult=True)
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Choose device, precision, threads and compilation for this run.

    Called once after detect_hardware. Backend plugins (cpu, cuda, mps) answer when
    ``spec.runtime.device`` is theirs or ``auto`` and their device exists; the first answer
    wins, so accelerator backends run before the ``trylast`` cpu backend. A backend may set
    process-wide state it owns (``torch.set_num_threads``) before returning.
    """


@hookspec
def estimate_memory(
    spec: RunSpec, hardware: HardwareProfile, runtime: RuntimeChoice, dataset: DatasetShape
) -> list[MemoryItem] | None:
    """Predict the peak memory of a training step of ``spec`` as itemised MemoryItems.

    Called before adapt_config, by ``trm estimate`` and ``trm analyze``, and again by
    adapt_config implementations through ``MemoryEstimate.for_spec`` for candidate specs.
    ``dataset`` holds the train split's shape (seq_len, vocab_size, puzzle identifiers,
    puzzles, groups). Each item names one share (weights, activations, CUDA context, …) with
    its bytes and location ("host" or "device"). Items from all plugins are summed per
    location, so a plugin must not repeat another's items. Bytes are never negative.
    """


@hookspec
def adapt_config(
    spec: RunSpec, hardware: HardwareProfile, estimate: MemoryEstimate, mode: str
) -> tuple[RunSpec, list[tuple[str, Any, Any, str]]] | None:
    """Fit the spec to the machine for ``mode`` (conservative, balanced or extreme).

    Called chained, in plugin order: each implementation receives the spec as changed by the
    ones before it. Return None to leave it unchanged, or ``(new_spec, changes)`` where each
    change is ``(key_path, old, new, reason)``. The core shows every change before training and
    writes them to ``adaptations.json``.
    """


@hookspec
def register_data_sources() -> list[DataSource] | None:
    """Return the data sources (tasks) this plugin provides.

    Called when a spec names a ``[data] source`` and by ``trm data build``. Names must be
    unique across plugins; a clash is an error naming both plugins.
    """


@hookspec(firstresult=True)
def load_checkpoint(path: Path, map_location: str) -> dict[str, Any] | None:
    """Read the checkpoint at ``path`` (a file, or a run directory meaning its newest).

    Called before training when resuming and by ``trm eval`` / ``trm solve``. Return the
    payload written by save_checkpoint, or None if this plugin does not handle ``path``.
    Raise TrmError for a file that is corrupt, unsafe or incompatible.
    """


@hookspec
def on_train_start(state: TrainState, control: TrainControl) -> None:
    """The loop is about to take its first step (``state.step`` > 0 after a resume)."""


@hookspec
def on_step(state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
    """Called after every optimizer step with that step's metrics.

    ``metrics`` holds step, samples, samples_per_s, loss, lr, mem_host_mb, mem_device_mb and
    the training accuracies. Act only through ``control``; return nothing.
    """


@hookspec
def on_out_of_memory(state: TrainState, error: BaseException, control: TrainControl) -> None:
    """A training step ran out of memory (CUDA, MPS, or a failed host allocation).

    Called by the loop after it has undone the step: gradients dropped, the carry untouched,
    the RNG restored, the error's traceback (and the activations it held) released. To have
    the same step retried, free what you can and ask for a smaller micro-batch with
    ``control.set_micro_batch(size, reason)``; the global batch stays, so gradient
    accumulation grows to match. If no plugin asks for a smaller size, the run fails with
    the error. ``state.micro_batch_size`` is the size that failed; ``state.step + 1`` is the
    step. The built-in memory-guard plugin implements this.
    """


@hookspec
def on_eval(state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
    """Called after each evaluation with exact_accuracy, cell_accuracy and the step."""


@hookspec
def on_thermal_event(event: ThermalEvent, control: TrainControl) -> None:
    """A thermal or power level changed (normal, warm, hot, critical, on battery).

    Called by the loop after a step, for each event a sensor plugin (thermal) reported with
    ``control.report_thermal_event``; every event is also recorded in metrics.jsonl. Respond
    through ``control`` (pause, smaller micro-batch, checkpoint); return nothing.
    """


@hookspec(firstresult=True)
def save_checkpoint(state: TrainState, run_dir: Path, reason: str) -> Path | None:
    """Write a checkpoint of ``state`` under ``run_dir`` and return the path written.

    Called at the end of a step when a checkpoint is due; ``reason`` is "end", "stop",
    "best" (this step's evaluation is the best so far: ``state.best_step == state.step``),
    "interval", or a reason a plugin gave to ``control.request_checkpoint``. The first plugin
    to return a path wins. A failed write must leave earlier checkpoints intact and raise
    OSError, which the loop reports as a warning (three failures in a row stop the run).
    """


@hookspec
def on_train_end(state: TrainState, summary: dict[str, Any]) -> None:
    """The run ended (finished, stopped or failed); ``summary`` is what summary.json holds."""
