"""The hooks trm calls, in the order of a run. Each docstring is the hook's contract.

A plugin implements any of these with ``@trm.hookimpl`` on a module-level function, or on a
method of a plugin class (one instance per run; see docs/plugins.md), of the same name; as
pluggy allows, an implementation may take only the arguments it uses.

The life of ``trm run``: device_backends and dense_optimizers (asked by check_spec),
check_spec, register_data_sources (when the spec's data must be built or its shape read),
detect_hardware, configure_runtime, estimate_memory, adapt_config (then configure_runtime
again when the runtime changed), recursion_schedule (with a time budget), load_checkpoint,
open_dataset, on_train_start; per step on_step (and on_out_of_memory, on_thermal_event,
on_eval, save_checkpoint as they arise); run_findings (rank 0) and on_train_end however the
loop ends.

Every ``trm`` command line first builds its parser, calling register_commands (and
register_formats, for ``trm export``'s choices); readers of a model call register_formats,
and the Python API's plugin-provided functions call api_functions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse

    from trm.control import ThermalEvent, TrainControl
    from trm.data.puzzle_dataset import PuzzleSplit
    from trm.data.reader import DataReader, ReaderChoice
    from trm.data.selection import SelectionRule
    from trm.data.shape import DatasetShape
    from trm.data.source import DataSource
    from trm.device.contract import DeviceBackend
    from trm.findings import Finding
    from trm.formats import ModelFormat
    from trm.hardware import HardwareProfile
    from trm.memory import MemoryEstimate, MemoryItem
    from trm.model import DenseOptimizer
    from trm.plugin_manager import TrmPluginManager
    from trm.recursion import RecursionShare
    from trm.runtime import RuntimeChoice
    from trm.spec import Change, RunSpec
    from trm.state import TrainState

PROJECT_NAME = "trm"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
# What a plugin marks its implementations with; ``trm.hookimpl`` is this marker.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -------------------------------------------------------------------------------------------
# Data: tasks a plugin provides
# -------------------------------------------------------------------------------------------


@hookspec
def register_data_sources() -> list[DataSource] | None:
    """Return the data sources (tasks) this plugin provides.

    Called when a command needs a source by name: ``trm run`` and ``trm estimate`` before
    planning (to build the spec's data or read its shape), ``trm data build``, ``trm solve``.
    Names must be unique across plugins; a clash is an error naming the source.
    """


# -------------------------------------------------------------------------------------------
# Planning: the machine, the runtime, the memory, the tier (before the loop)
# -------------------------------------------------------------------------------------------


@hookspec
def check_spec(spec: RunSpec) -> None:
    """Refuse a spec this plugin cannot work with: raise TrmError naming the key path.

    Called first by every command that plans a run (``trm run``, ``trm estimate``, ``trm
    analyze``), before any data is built or file written, with the spec as given (``--set``
    applied, not yet adapted). A plugin configured by its own table ``[plugins.NAME]``
    (``spec.plugins[NAME]``, plain TOML data) structures and checks it here — strictly, as
    :func:`trm.spec.structure_strict` does with ``root="plugins.NAME"`` — so a bad value is
    one line and exit 2. Only enabled plugins are called; the core refuses a table that
    names no installed plugin.
    """


@hookspec
def detect_hardware() -> HardwareProfile | None:
    """Report the part of the machine this plugin can see.

    Called once at the start of ``trm run``, ``trm analyze``, ``trm estimate`` and ``trm bench``.
    Return a HardwareProfile with only the fields this plugin knows set; leave the rest None.
    Never guess: an unknown value stays None and is shown as "unknown". The core merges the
    parts field by field in pluggy's call order, the first known value winning; the generic
    ``system`` plugin is ``trylast``, so a backend's or a third party's value overrides it.
    """


@hookspec
def device_backends() -> list[DeviceBackend] | None:
    """The kinds of device this plugin can train on, as :class:`trm.device.contract.DeviceBackend`
    objects (each claims a ``runtime.device`` name: ``cuda``, ``xla``, ``npu``).

    Called when a command checks a spec (``runtime.device`` must be ``auto`` or a name some
    backend claims; an unknown name is one error line listing the installed backends), when
    ``trm run`` joins a torchrun process group (each backend's ``process_group_backends()``), by
    ``trm analyze --benchmark`` (each backend's ``machine_devices``) and by ``trm plugins``.
    Return backends whose device is absent too: their ``unavailable_reason()`` says why not.
    """


@hookspec
def dense_optimizers() -> list[DenseOptimizer] | None:
    """The dense optimizers this plugin offers, as :class:`trm.model.DenseOptimizer` entries
    (each answers to a ``train.optimizer`` name: ``adam_atan2``, ``lion``).

    Called when a command checks a spec (``train.optimizer`` must name exactly one entry of
    the enabled plugins; an unknown name is one error line listing the names offered), by
    the memory estimate (the entry's state bytes per parameter element) and when ``trm run``
    builds its optimizers (the entry's ``build``). Offer an entry whose package is missing
    too, with ``unavailable_reason`` saying what to install. The puzzle-embedding table's
    sign-SGD is not chosen here.
    """


@hookspec(firstresult=True)
def configure_runtime(spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice | None:
    """Choose device, precision, threads and compilation for this run.

    Called after detect_hardware, and again for each spec an estimate is remade for. Backend
    plugins (cpu, cuda, mps, xla, a third party's) answer when ``spec.runtime.device`` is
    theirs or ``auto`` and their device exists, with the backend object that carries out the
    device contract in ``RuntimeChoice.backend``; the first answer wins, so accelerator
    backends run before the ``trylast`` cpu backend. A backend may set process-wide state it
    owns (``torch.set_num_threads``) before returning.
    """


@hookspec
def estimate_memory(
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    dataset: DatasetShape,
    optimizer: DenseOptimizer,
) -> list[MemoryItem] | None:
    """Predict the peak memory of a training step of ``spec`` as itemised MemoryItems.

    Called before adapt_config, by ``trm estimate`` and ``trm analyze``, and again by
    adapt_config implementations through ``MemoryEstimate.for_spec`` for candidate specs.
    ``dataset`` holds the train split's shape (seq_len, vocab_size, puzzle identifiers,
    puzzles, groups); ``optimizer`` is the entry ``train.optimizer`` names (its
    ``state_bytes_for`` the model's parameters). Each item names one share (weights,
    activations, CUDA context, …) with its bytes and location ("host" or "device"). Items
    from all plugins are summed per location, so a plugin must not repeat another's items.
    Bytes are never negative.
    """


@hookspec
def adapt_config(
    spec: RunSpec, hardware: HardwareProfile, estimate: MemoryEstimate, mode: str
) -> tuple[RunSpec, list[Change]] | None:
    """Fit the spec to the machine for ``mode`` (conservative, balanced or extreme).

    Called chained, in plugin order: each implementation receives the spec as changed by the
    ones before it. Return None to leave it unchanged, or ``(new_spec, changes)`` with one
    :class:`trm.spec.Change` (key, old, new, reason) per changed value. The core shows every
    change before training and writes them to ``adaptations.json``.
    """


@hookspec(firstresult=True)
def recursion_schedule(spec: RunSpec, total_steps: int) -> list[RecursionShare] | None:
    """The recursion depths this plugin will ask for in a run of ``total_steps`` steps.

    Called by ``trm run`` before training when the spec sets ``train.time_budget_s``
    (``trm.plan.budget``): the planner times a step at each depth and chooses the steps so
    that the shares' times fill the budget; it may call again with other totals. A plugin
    that asks for depths through ``control.set_recursion_depth`` answers with what it will
    ask: :class:`trm.recursion.RecursionShare` values in step order (fraction of
    ``total_steps``, ``H_cycles``, ``L_cycles``), fractions summing to 1, depths capped at the
    spec's ``arch.H_cycles`` / ``arch.L_cycles`` as the loop caps them. None (no plugin
    answers): every step runs at the spec's depth. The first answer wins. A plugin that
    answers is switched off while the steps are timed, since the timing fixes each depth.
    """


# -------------------------------------------------------------------------------------------
# Starting: resuming and the first step
# -------------------------------------------------------------------------------------------


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


@hookspec(firstresult=True)
def open_dataset(
    split: PuzzleSplit, choice: ReaderChoice, device: str, pin_memory: bool
) -> DataReader | None:
    """Return the reader that serves the train ``split`` for ``choice.name``, or None.

    Called once per run, after resuming, with the planned :class:`trm.data.reader.ReaderChoice`
    (``memory`` or ``stream``, its reason and ``prefetch_steps``), the run's device and
    ``pin_memory``: whether the run's backend copies batches from pinned host memory
    (``DeviceBackend.pins_host_batches``: CUDA's, or a third party's that says so), which a
    reader honours rather than guessing from the device's name. An implementation may take
    any subset of these arguments. The first answer wins; when nobody answers, the core
    serves ``memory`` itself
    (:class:`trm.data.reader.MemoryReader`) and refuses any other name. The reader must
    follow :class:`trm.data.reader.DataReader`: ``batch(step)`` returns exactly the rows the
    sampler names for that step. The built-in ``streaming`` plugin answers ``stream``.
    """


# -------------------------------------------------------------------------------------------
# Running: after each step, and what may happen during one
# -------------------------------------------------------------------------------------------


@hookspec
def on_step(state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
    """Called after every optimizer step with that step's metrics row.

    ``metrics`` holds step, samples, samples_per_s, loss, lr, mem_host_mb (resident memory),
    mem_device_mb (the device's peak during this step; None on the CPU) and the training
    accuracies. Device memory counters belong to the core: read them
    (:mod:`trm.device.memory`), never reset them. Act only through ``control``.
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
def on_thermal_event(event: ThermalEvent, control: TrainControl) -> None:
    """A thermal or power level changed (normal, warm, hot, critical, on battery).

    Called by the loop after a step, for each event a sensor plugin (thermal) reported with
    ``control.report_thermal_event``; every event is also recorded in metrics.jsonl. Respond
    through ``control`` (pause, smaller micro-batch, checkpoint); return nothing.
    """


@hookspec
def on_eval(state: TrainState, metrics: dict[str, float], control: TrainControl) -> None:
    """Called after each evaluation with exact_accuracy, cell_accuracy and the step."""


@hookspec(firstresult=True)
def save_checkpoint(state: TrainState, run_dir: Path, reason: str) -> Path | None:
    """Write a checkpoint of ``state`` under ``run_dir`` and return the path written.

    Called at the end of a step when a checkpoint is due; ``reason`` is "end", "stop",
    "best" (this step's evaluation is the best so far: ``state.best_step == state.step``),
    "interval", or a reason a plugin gave to ``control.request_checkpoint``. The first plugin
    to return a path wins. A failed write must leave earlier checkpoints intact and raise
    OSError, which the loop reports as a warning (three failures in a row stop the run).
    """


# -------------------------------------------------------------------------------------------
# Test time: choosing one answer among a puzzle's trajectories (--explore, --select)
# -------------------------------------------------------------------------------------------


@hookspec
def selection_rules() -> list[SelectionRule] | None:
    """Return the selection rules this plugin provides (:mod:`trm.data.selection`).

    Called when exploration needs a rule by name: ``trm solve``/``trm eval`` with
    ``--select``, ``Model.solve(select=...)`` and a run's evaluation (``train.eval_select``),
    before any puzzle is run. A rule has ``name`` (what ``--select`` takes), ``needs_rules``
    (True: it asks the task's rules, refused for a task whose answers cannot be judged from
    the question) and ``pick(candidates) -> int``, the index of the chosen trajectory among
    ``candidates`` (a :class:`trm.data.selection.Candidates`: one puzzle's answers,
    halting steps and halting logits, trajectory 0 the noise-free one). Names must be unique
    across plugins; an answer that is not an index of a trajectory is an error naming the rule.
    """


# -------------------------------------------------------------------------------------------
# Ending
# -------------------------------------------------------------------------------------------


@hookspec
def run_findings(rows: list[dict[str, Any]]) -> list[Finding] | None:
    """Return what this plugin finds wrong in a run from its metrics.jsonl ``rows`` (every
    process's rows, in the file's order), as :class:`trm.findings.Finding` objects.

    Called once as the loop ends, however it ends (under data parallelism by rank 0 alone,
    which writes metrics.jsonl), before summary.json is written: each finding becomes a
    ``warning:`` line in the run's output and an entry of summary.json's ``findings`` (the
    plugins' findings in the order the plugins were registered). An implementation that
    raises is one warning line and no findings, never the run's failure. The built-in
    ``report`` plugin answers it with its leak and slowdown detectors (those ``trm report``
    shows).
    """


@hookspec
def on_train_end(state: TrainState, summary: dict[str, Any]) -> None:
    """The loop ended — finished, stopped, or failed with an exception (called from a
    ``finally``, so it runs for every ending); ``summary`` is what summary.json holds
    (``stopped`` says how it ended, ``error`` why it failed)."""


# -------------------------------------------------------------------------------------------
# Commands and formats: what a plugin adds to trm's surface (the command line, the Python API,
# the files a model is written to and read from)
# -------------------------------------------------------------------------------------------


@hookspec
def register_commands(
    commands: argparse._SubParsersAction, common: argparse.ArgumentParser, pm: TrmPluginManager
) -> None:
    """Add subcommands to ``trm``: ``commands.add_parser(NAME, parents=[common], help=…)``,
    then the parser's arguments and ``set_defaults(func=RUN)``, where ``RUN(args)`` returns
    the exit code (0 done; raise TrmError for bad input: one line, exit 2).

    Called once per ``trm`` invocation, while its parser is built — before the command line
    is parsed, so for ``trm --help`` too: keep it cheap and import the command's work inside
    ``RUN``. ``common`` holds the options every command takes (``--debug``, ``--plugins``);
    ``pm`` is the invocation's plugin manager (the formats, sources and backends on offer).
    A name another command has is refused, and so is every command of a plugin whose
    implementation raises; ``trm`` says so in one line on stderr and the rest works.
    """


@hookspec
def register_formats() -> list[ModelFormat] | None:
    """Return the model formats this plugin offers (:class:`trm.formats.ModelFormat`).

    Called by ``trm export`` (``--format NAME``: its choices and each format's options are
    read when ``trm``'s parser is built), and by every reader of a model —
    ``trm.load``, ``trm solve``, ``trm eval`` and ``trm run --init-from`` — which asks each
    format whether a path is one of its models. Names must be unique across plugins.
    """


@hookspec
def api_functions() -> dict[str, Callable[..., Any]] | None:
    """Return the Python functions this plugin lends trm's API, by name.

    The core's API calls them by name and never imports the plugin: ``trm.sweep`` calls the
    one named ``"sweep"``, ``Run.report`` the one named ``"report"``. Called when such an
    API function is called; a name two plugins return is an error.
    """
