"""``trm.train``: run a spec exactly as ``trm run`` does.

``trm run`` (core/cli/run_cmd.py) parses its arguments into :class:`RunOptions` and calls
:func:`run_training`; :func:`train` builds the same options from a Python caller's arguments
(core/api/arguments.py). The way of a run, top to bottom in :func:`run_training`:

1. read the input: the spec, its overrides, the plugins (every rank checks; rank 0 decides);
2. claim the run directory and plan: rank 0 checks and locks the directory, fits the spec to
   this machine, plans a time budget's steps and builds the data, while the other ranks wait;
   then they plan for themselves and adopt rank 0's model, schedule and ``max_steps``
   (:mod:`trm.device.rank_agreement`). The directory is claimed before planning because the
   plan builds the data inside it;
3. train: the loop (:class:`~trm.loop.Trainer`), which writes summary.json.

Under torchrun every process calls this as one rank of a data-parallel run
(docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any

import attrs

from trm.api.arguments import (
    override_texts,
    path_argument,
    plugin_arguments,
    python_errors,
    text_argument,
)
from trm.api.log import Log, say
from trm.api.run import Run, RunSummary
from trm.api.specs import SpecLike, read_spec
from trm.device import distributed
from trm.device.distributed import World
from trm.device.rank_agreement import (
    adopt_first,
    first_rank_decides,
    first_rank_first,
    quiet_unless_first,
)
from trm.device.threads import torch_threads_kept
from trm.errors import TrmError
from trm.file_lock import HeldLock
from trm.init_from import check_init_from
from trm.loop import Trainer
from trm.loop.checkpoints import parse_interval
from trm.loop.compile_record import StepClock
from trm.measure.stage_speed import time_depths
from trm.memory import DEFAULT_MODE, EXTREME_RISKS, MODES
from trm.paths import default_run_dir
from trm.plan import plan_run
from trm.plan.budget import BudgetPlan, given_steps, plan_steps, write_budget_record
from trm.plan.build import BUILD_RECORD
from trm.plan.dataset import ensure_dataset
from trm.plan.pipeline import Plan, check_device
from trm.plan.run_dir import (
    LOCK_FILE,
    check_checkpoint_room,
    check_reuse,
    clear_run,
    inspect_run_dir,
    lock_run_dir,
    preflight,
    write_run_record,
)
from trm.plugin_manager import TrmPluginManager, load_plugins
from trm.spec import RunSpec

__all__ = ["STOPPED_BY_SIGNAL", "Run", "RunOptions", "RunSummary", "run_training", "train"]

# summary.json's ``stopped`` for a run a signal stopped (``trm run`` exits 130 for these)
STOPPED_BY_SIGNAL = ("interrupted", "terminated")


@attrs.frozen
class RunOptions:
    """Everything ``trm run`` takes: the spec (a shipped name, a TOML path or a
    :class:`~trm.spec.RunSpec`), ``--plugins`` values, ``--mode``, ``--set`` overrides,
    ``--out``, ``--resume`` (auto, never or a checkpoint path), ``--replace``,
    ``--max-steps``, ``--checkpoint-every`` and ``--init-from``; and, from the Python API,
    in-process plugin objects with the names they run under (this run only)."""

    spec: SpecLike
    plugins: tuple[str, ...] = ()
    mode: str = DEFAULT_MODE
    overrides: tuple[str, ...] = ()
    out: Path | None = None
    resume: str = "auto"
    replace: bool = False
    max_steps: int | None = None
    checkpoint_every: str | None = None
    init_from: Path | None = None
    plugin_objects: tuple[tuple[str, Any], ...] = ()


def train(
    spec: SpecLike,
    *,
    out: Path | str | None = None,
    plugins: Any = (),
    disable: Any = (),
    overrides: Any = None,
    max_steps: int | None = None,
    resume: str | Path = "auto",
    mode: str = DEFAULT_MODE,
) -> Run:
    """Train ``spec`` exactly as ``trm run`` does and return the :class:`~trm.api.run.Run`.

    ``spec`` is a shipped spec's name ("quickstart"), a TOML path or a
    :class:`~trm.spec.RunSpec`. ``out`` is the run directory (default ``runs/<spec name>``).
    ``plugins`` switches plugins on: installed plugins by name (``"mkl"``) and plugin
    objects whose methods carry ``@trm.hookimpl`` (``MyLogger()``), registered for this run
    only, like a callback; ``disable`` switches plugins off by name (``["progress"]``).
    ``overrides`` sets spec keys: ``{"train.lr": 3e-4}`` (``"KEY=VALUE"`` texts, as
    ``--set`` takes them, are accepted too). ``max_steps`` stops once the run has taken that
    many steps in all; ``resume`` is "auto" (continue the newest checkpoint in ``out``),
    "never", or a checkpoint path; ``mode`` is the memory tier ("conservative",
    "balanced", "extreme").

    Bad input raises :class:`~trm.errors.TrmError` naming the argument, before anything is
    written. A run stopped by SIGINT/SIGTERM (a notebook's interrupt) returns normally after
    its checkpoint, with ``stopped`` "interrupted"/"terminated"; ``trm.train`` with the same
    arguments continues it. A run that cannot go on raises
    :class:`~trm.errors.TrainingFailed`.
    """
    with python_errors():
        names, objects = plugin_arguments(plugins, disable)
        options = RunOptions(
            spec=spec,
            plugins=names,
            plugin_objects=objects,
            mode=text_argument(mode, "mode", MODES),
            overrides=override_texts(overrides),
            out=path_argument(out, "out"),
            resume=text_argument(resume, "resume"),
            max_steps=_max_steps(max_steps),
        )
        return run_training(options, say)


def _max_steps(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TrmError(f"max_steps must be a whole number of at least 1, got {value!r}")
    if value < 1:
        raise TrmError(f"max_steps must be at least 1, got {value}")
    return value


@torch_threads_kept()
def run_training(options: RunOptions, log: Log) -> Run:
    """The work of ``trm run`` (and ``trm.train``), in the order the module's docstring
    gives. ``log`` shows status lines. Under torchrun, rank 0 alone shows progress and
    writes the run's files (docs/distributed.md). torch's thread count is the caller's again
    when it returns or raises (:func:`~trm.device.threads.torch_threads_kept`)."""
    # one process unless torchrun started several; the backends name their process groups
    world = distributed.start(_device_backends(options))
    try:
        spec, interval, pm = first_rank_decides(lambda: _read_input(options, world), world)
        with quiet_unless_first(world):
            _warn_about_plugins(pm, world, log)
            run_dir = default_run_dir(spec.name, options.out)
            options = _continue_after_restart(options, run_dir, log)
            claimed = first_rank_first(
                lambda: _claim_and_plan(options, pm, spec, run_dir, log), world
            )
            lock = claimed[0] if claimed is not None else None
            try:
                if claimed is not None:
                    plan, data_dir, budget, step_clock = claimed[1:]
                else:
                    _check_shared_data(spec, run_dir, world)
                    plan, data_dir, budget, step_clock = _plan(
                        options, pm, spec, run_dir, False, log
                    )
                plan = _adopt_first_plan(plan, world, log)
                max_steps = _adopt_first_max_steps(options.max_steps, world, log)
                summary = _train(
                    options,
                    plan,
                    data_dir,
                    budget,
                    max_steps,
                    interval,
                    pm,
                    run_dir,
                    world,
                    log,
                    step_clock,
                )
            finally:
                if lock is not None:
                    lock.close()
    finally:
        distributed.finish()
    _say_how_it_stopped(summary, log)
    return Run(path=run_dir, summary=RunSummary.from_document(summary))


def _device_backends(options: RunOptions) -> list:
    """The device backends of the plugins asked for, to start the process group with; none
    when the plugins cannot load (the error is reported once the ranks can agree on it, by
    :func:`_read_input`)."""
    try:
        return load_plugins(options.plugins, extra_modules=options.plugin_objects).device_backends()
    except TrmError:
        return []


def _read_input(
    options: RunOptions, world: World
) -> tuple[RunSpec, tuple[int, float] | None, TrmPluginManager]:
    """The spec (loaded, overrides applied, checked), the checkpoint interval and the run's
    plugin manager (the spec's plugin tables switch theirs on); TrmError for bad input."""
    if options.resume not in ("auto", "never") and not Path(options.resume).exists():
        raise TrmError(f"--resume {options.resume}: no such checkpoint file or run directory")
    if options.init_from is not None and not options.init_from.exists():
        raise TrmError(f"--init-from {options.init_from}: no such checkpoint file or folder")
    if options.replace and options.resume != "never":
        raise TrmError("--replace starts afresh: use it with --resume never")
    interval = parse_interval(options.checkpoint_every) if options.checkpoint_every else None
    spec = read_spec(options.spec, options.overrides)
    pm = load_plugins(
        options.plugins, extra_modules=options.plugin_objects, spec_tables=spec.plugins
    )
    check_device(pm, spec.runtime.device)  # an unclaimed device: refused before any write
    world.rows(spec.train.global_batch_size)  # TrmError unless it divides among the ranks
    if options.init_from is not None:  # its weights are refused before --out is created
        run_dir = default_run_dir(spec.name, options.out)
        check_init_from(pm, options.init_from, spec, run_dir, options.resume)
    return spec, interval, pm


def _warn_about_plugins(pm: TrmPluginManager, world: World, log: Log) -> None:
    """Say which plugins are on, and warn when none saves checkpoints or, under torchrun,
    the distributed plugin is off."""
    log(f"plugins on: {pm.describe_enabled()}")
    if not pm.hook.save_checkpoint.get_hookimpls():
        log(
            "warning: no plugin saves checkpoints (is checkpoint switched off?): a crash or "
            "a stop loses everything this run trains"
        )
    if world.distributed and "distributed" not in pm.enabled_names():
        log(
            "warning: the distributed plugin is off: each rank plans as if it had the whole "
            "node (all its cores and memory)"
        )


def _claim_and_plan(
    options: RunOptions, pm: TrmPluginManager, spec: RunSpec, run_dir: Path, log: Log
) -> tuple[HeldLock | None, Plan, Path, BudgetPlan | None, StepClock]:
    """Rank 0: check, create and lock the run directory, check the reuse rules (``--resume``,
    ``--replace``), then plan and build the data. Returns the lock (the caller closes it)
    and the plan. A refusal (TrmError) — or any other failure before training starts —
    closes the lock and removes the lock file and the folders this call created, so bad
    input leaves no trace."""
    created = _missing_folders(run_dir)
    had_lock_file = (run_dir / LOCK_FILE).exists()
    lock = None
    try:
        preflight(run_dir)
        lock = lock_run_dir(run_dir)
        check_reuse(run_dir, spec, options.resume, options.replace)
        return (lock, *_plan(options, pm, spec, run_dir, True, log))
    except BaseException:
        if lock is not None:
            lock.close()
        _undo_preflight(run_dir, created, had_lock_file)
        raise


def _adopt_first_plan(plan: Plan, world: World, log: Log) -> Plan:
    """Train what rank 0 planned: its [arch], [train] and [data] (a tier may have changed
    them for rank 0's memory); this rank keeps its own runtime."""
    spec = plan.spec

    def warn(_mine: object, _first: object) -> None:
        log(f"warning: rank {world.rank} planned another model or schedule; training rank 0's")

    arch, train_, data = adopt_first((spec.arch, spec.train, spec.data), world, warn)
    if (arch, train_, data) == (spec.arch, spec.train, spec.data):
        return plan
    return attrs.evolve(plan, spec=attrs.evolve(spec, arch=arch, train=train_, data=data))


def _adopt_first_max_steps(max_steps: int | None, world: World, log: Log) -> int | None:
    """Stop where rank 0 stops: ``--max-steps`` given differently to the ranks would leave
    some waiting for the others' next step until the collective timeout."""

    def warn(mine: int | None, first: int | None) -> None:
        log(
            f"warning: rank {world.rank} was given --max-steps {mine or 'none'}; every "
            f"rank stops where rank 0 does (--max-steps {first or 'none'})"
        )

    return adopt_first(max_steps, world, warn)


def _train(
    options: RunOptions,
    plan: Plan,
    data_dir: Path,
    budget: BudgetPlan | None,
    max_steps: int | None,
    interval: tuple[int, float] | None,
    pm: TrmPluginManager,
    run_dir: Path,
    world: World,
    log: Log,
    step_clock: StepClock,
) -> dict[str, Any]:
    """The loop over the planned spec; returns summary.json's content. Rank 0 records the
    run (spec, plan, budget) once the loop has accepted the run directory."""
    runtime = plan.runtime
    log(
        f"training {plan.spec.name} on {runtime.device} ({runtime.precision}, "
        f"{runtime.threads} thread{'s' if runtime.threads != 1 else ''}) into {run_dir}"
    )

    def accepted(_state: object) -> None:
        if not world.is_first:
            return
        if options.replace:
            clear_run(run_dir)
        write_run_record(run_dir, plan)
        if budget is not None:
            write_budget_record(run_dir, budget)

    trainer = Trainer(
        plan.spec,
        runtime,
        pm,
        run_dir,
        data_dir,
        log,
        resume=options.resume,
        max_steps=max_steps,
        checkpoint_interval=interval,
        on_accepted=accepted,
        reader=plan.reader,
        init_from=options.init_from,
        step_clock=step_clock,
    )
    return trainer.fit()


def _say_how_it_stopped(summary: dict[str, Any], log: Log) -> None:
    """After a stop by a signal: which checkpoint holds the run."""
    if summary["stopped"] not in STOPPED_BY_SIGNAL:
        return
    saved = summary.get("checkpoint_step")
    if saved == summary["steps"]:
        log(f"stopped after a checkpoint at step {saved}")
    elif saved is not None:
        log(
            f"stopped at step {summary['steps']}, but its checkpoint failed; "
            f"the checkpoint of step {saved} is intact"
        )
    else:
        log(f"stopped at step {summary['steps']} without a checkpoint")


def _plan(
    options: RunOptions,
    pm: TrmPluginManager,
    spec: RunSpec,
    run_dir: Path,
    build: bool,
    log: Log,
) -> tuple[Plan, Path, BudgetPlan | None, StepClock]:
    """Fit the spec to this machine (this rank), show what changed, plan the steps of a time
    budget (rank 0; the others adopt its spec), find or build the data. The step clock the
    loop records the compile ledger's figures with holds the compile seconds of the budget's
    timing steps."""
    plan = plan_run(pm, spec, options.mode, run_dir, log=log, build_data=build)
    step_clock = StepClock(plan.runtime.compile_key)
    for line in (*plan.runtime.notes, *(c.describe() for c in plan.changes)):
        log(line)
    if plan.runtime.reuse_host_memory:
        log("host memory: freed blocks are kept for reuse (resident memory stays at its peak)")
    if options.mode == "extreme":
        log(f"warning: {EXTREME_RISKS}")
    budget = None
    if build:
        timer = functools.partial(
            time_depths, requested_plugins=options.plugins, log=log, clock=step_clock
        )
        given = given_steps(options.max_steps, options.overrides)
        plan, budget = plan_steps(pm, plan, run_dir, options.resume, given, timer, log)
    data_dir = ensure_dataset(pm, plan.spec, run_dir, log)
    if build:
        optimizer = pm.dense_optimizer(plan.spec.train.optimizer)
        check_checkpoint_room(run_dir, plan.spec, plan.dataset, optimizer)
    return plan, data_dir, budget, step_clock


def _missing_folders(run_dir: Path) -> list[Path]:
    """The folders of ``run_dir``'s path that do not exist yet, deepest first (what
    :func:`preflight` is about to create)."""
    missing = []
    for folder in (run_dir, *run_dir.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _undo_preflight(run_dir: Path, created: list[Path], had_lock_file: bool) -> None:
    """After a refused run, so that bad input leaves no trace: remove the lock file unless
    it was there before, then the folders this command created (``created``, deepest first)
    while they are empty."""
    if not had_lock_file:
        with contextlib.suppress(OSError):
            (run_dir / LOCK_FILE).unlink(missing_ok=True)
    for folder in created:
        try:
            (folder / LOCK_FILE).unlink(missing_ok=True)
            folder.rmdir()
        except OSError:  # it holds something else (built data): keep it and what is above
            return


def _continue_after_restart(options: RunOptions, run_dir: Path, log: Log) -> RunOptions:
    """After torchrun restarted the job (``--max-restarts``), continue from the run's newest
    checkpoint: ``--resume never``/``--replace``/a path meant the first attempt."""
    restarts = distributed.restart_count()
    if restarts == 0 or options.resume == "auto":
        return options
    if not inspect_run_dir(run_dir).checkpoint_steps:
        return options
    log(
        f"torchrun restart {restarts}: continuing from the newest checkpoint in {run_dir} "
        f"(--resume {options.resume} applied to the first attempt)"
    )
    return attrs.evolve(options, resume="auto", replace=False)


def _check_shared_data(spec: RunSpec, run_dir: Path, world: World) -> None:
    """A rank other than 0 must see the data rank 0 built (a filesystem shared by the nodes)."""
    if spec.data.dir or (run_dir / "data" / BUILD_RECORD).exists():
        return
    raise TrmError(
        f"rank {world.rank} does not see the data rank 0 built in {run_dir / 'data'}: on "
        "several nodes the run directory must be on a filesystem every node shares (--out), "
        "or set data.dir to a dataset present on every node"
    )
