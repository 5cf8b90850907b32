"""``trm.train``: run a spec exactly as ``trm run`` does, and the :class:`Run` it returns.

``trm run`` (core/cli/run_cmd.py) parses its arguments into :class:`RunOptions` and calls
:func:`run_training`; ``trm.train`` builds the same options from keyword arguments. Under
torchrun every process calls this as one rank of a data-parallel run (docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from trm.api.log import Log, say
from trm.api.specs import SpecLike, read_spec
from trm.device import distributed
from trm.device.distributed import World
from trm.errors import RankZeroStopped, TrmError
from trm.interop.init_from import check_init_from
from trm.loop import Trainer
from trm.loop.checkpoints import parse_interval
from trm.measure.stage_speed import time_depths
from trm.memory import DEFAULT_MODE, EXTREME_RISKS
from trm.paths import default_run_dir, out_argument
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

if TYPE_CHECKING:
    from trm.report.build import Report

T = TypeVar("T")

# summary.json's ``stopped`` for a run a signal stopped (``trm run`` exits 130 for these)
STOPPED_BY_SIGNAL = ("interrupted", "terminated")


@attrs.frozen
class RunOptions:
    """Everything ``trm run`` takes: the spec (a shipped name, a TOML path or a
    :class:`~trm.spec.RunSpec`), ``--plugins`` values, ``--mode``, ``--set`` overrides,
    ``--out``, ``--resume`` (auto, never or a checkpoint path), ``--replace``,
    ``--max-steps``, ``--checkpoint-every`` and ``--init-from``."""

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


@attrs.frozen
class Run:
    """A finished (or stopped) run: its directory and what summary.json says.

    ``summary`` is summary.json's content (docs/user-guide.md lists its fields; ``stopped``
    says how the run ended). On ranks other than 0 under torchrun nothing is written, so
    :attr:`metrics` and :meth:`report` read rank 0's files when the folder is shared.
    """

    dir: Path
    summary: dict[str, Any]

    @property
    def stopped(self) -> str:
        """How the run ended: "finished", "max_steps", "interrupted", "terminated" or a
        plugin's reason (summary.json's ``stopped``)."""
        return str(self.summary["stopped"])

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl, oldest first, each as written (training rows, and
        rows with ``kind`` "eval" or "event"; docs/user-guide.md lists every field). Read
        afresh on each access; a last line cut short by a crash is left out."""
        path = self.dir / "metrics.jsonl"
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise TrmError(f"{path} does not exist: the run wrote no metrics") from None
        rows = []
        for number, line in enumerate(lines, start=1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if number < len(lines):
                    raise TrmError(
                        f"{path} line {number} is not JSON; the file is damaged"
                    ) from None
        return rows

    def report(self, out: Path | str | None = None) -> Report:
        """Write the report ``trm report RUN_DIR --out OUT`` writes (plots, index.html,
        report.json) into ``out`` (default ``RUN_DIR/report``, replacing one there); returns
        it (``out_dir``, ``pngs``, ``document``). TrmError when ``out`` cannot be written."""
        from trm.report.build import make_report  # matplotlib loads here

        return make_report([self.dir], Path(out) if out is not None else self.dir / "report")


def train(
    spec: SpecLike,
    *,
    out: Path | str | None = None,
    plugins: Iterable[str] = (),
    overrides: Iterable[str] | None = None,
    max_steps: int | None = None,
    resume: str | Path = "auto",
    mode: str = DEFAULT_MODE,
) -> Run:
    """Train ``spec`` exactly as ``trm run`` does and return the :class:`Run`.

    ``spec`` is a shipped spec's name ("quickstart"), a TOML path or a
    :class:`~trm.spec.RunSpec`. ``out`` is the run directory (default ``runs/<spec name>``);
    ``plugins`` holds ``--plugins`` values (``"mkl"``, ``"no:progress"`` switches the live
    progress off); ``overrides`` holds ``--set`` texts (``"train.lr=3e-4"``); ``max_steps``
    stops once the run has taken that many steps in all; ``resume`` is "auto" (continue the
    newest checkpoint in ``out``), "never", or a checkpoint path; ``mode`` is the memory tier.

    Bad input raises :class:`~trm.errors.TrmError` with the message ``trm run`` prints,
    before anything is written. A run stopped by SIGINT/SIGTERM (a notebook's interrupt)
    returns normally after its checkpoint, with ``stopped`` "interrupted"/"terminated";
    ``trm.train`` with the same arguments continues it. A run that cannot go on raises
    :class:`~trm.errors.TrainingFailed`.
    """
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)):
        raise TrmError(f"max_steps must be a whole number of at least 1, got {max_steps!r}")
    if max_steps is not None and max_steps < 1:
        raise TrmError(f"argument --max-steps: must be at least 1, got {max_steps}")
    options = RunOptions(
        spec=spec,
        plugins=_texts(plugins, "plugins"),
        mode=mode,
        overrides=_texts(overrides or (), "overrides"),
        out=out_argument(out, "out"),
        resume=str(resume),
        max_steps=max_steps,
    )
    return run_training(options, say)


def _texts(values: Iterable[str] | str, what: str) -> tuple[str, ...]:
    """A list argument as a tuple of strings; TrmError for one bare string (a common slip:
    ``plugins="mkl"`` would otherwise read as four one-letter names)."""
    if isinstance(values, str):
        raise TrmError(f"{what} takes a list of strings, e.g. {what}=[{values!r}]")
    texts = tuple(values)
    odd = [v for v in texts if not isinstance(v, str)]
    if odd:
        raise TrmError(f"{what} takes strings; got {odd[0]!r}")
    return texts


def run_training(options: RunOptions, log: Log) -> Run:
    """The work of ``trm run`` (and ``trm.train``): check the input, plan, lock and record
    the run directory, train. ``log`` shows status lines. Under torchrun, rank 0 alone
    shows progress and writes the run's files (docs/distributed.md)."""
    # one process unless torchrun started several; the backends name their process groups
    world = distributed.start(_device_backends(options))
    try:
        spec, interval, pm = _first_rank_decides(lambda: _read_input(options, world), world)
        with _quiet_stdout(not world.is_first):  # rank 0 alone shows progress
            return _run(options, spec, interval, world, pm, log)
    finally:
        distributed.finish()


def _device_backends(options: RunOptions) -> list:
    """The device backends of the plugins asked for, to start the process group with; none
    when the plugins cannot load (the error is reported once the ranks can agree on it, by
    :func:`_read_input`)."""
    try:
        return load_plugins(options.plugins).device_backends()
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
    pm = load_plugins(options.plugins, spec_tables=spec.plugins)
    check_device(pm, spec.runtime.device)  # an unclaimed device: refused before any write
    world.rows(spec.train.global_batch_size)  # TrmError unless it divides among the ranks
    if options.init_from is not None:  # its weights are refused before --out is created
        run_dir = default_run_dir(spec.name, options.out)
        check_init_from(pm, options.init_from, spec, run_dir, options.resume)
    return spec, interval, pm


def _first_rank_decides(check: Callable[[], T], world: World) -> T:
    """``check()`` on every rank; when it refuses any rank's input, every rank stops: rank 0
    raises the error (its own, else the first refusing rank's, named), the others
    :class:`RankZeroStopped` (they exit quietly), so the error is said once."""
    try:
        value, refused = check(), None
    except TrmError as exc:
        value, refused = None, exc
    said = distributed.gather_objects(None if refused is None else str(refused), patient=True)
    first = next(((rank, text) for rank, text in enumerate(said) if text is not None), None)
    if first is None:
        return value  # type: ignore[return-value]
    rank, text = first
    if not world.is_first:
        raise RankZeroStopped(text)
    raise refused if refused is not None else TrmError(f"rank {rank}: {text}")


def _run(
    options: RunOptions,
    spec: RunSpec,
    interval: tuple[int, float] | None,
    world: World,
    pm: TrmPluginManager,
    log: Log,
) -> Run:
    """One process, or one rank of a torchrun job: rank 0 checks and locks the run
    directory, plans and builds the data while the others wait; then every rank plans for
    itself with rank 0's model and training settings."""
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
    run_dir = default_run_dir(spec.name, options.out)
    options = _continue_after_restart(options, run_dir, log)
    max_steps = options.max_steps
    lock = None
    try:
        error: str | None = None
        plan = data_dir = budget = None
        if world.is_first:
            created = _missing_folders(run_dir)
            had_lock_file = (run_dir / LOCK_FILE).exists()
            try:
                preflight(run_dir)
                lock = lock_run_dir(run_dir)
                check_reuse(run_dir, spec, options.resume, options.replace)
                plan, data_dir, budget = _plan(options, pm, spec, run_dir, build=True, log=log)
            except TrmError as exc:
                error = str(exc)
                if lock is not None:
                    lock.close()
                    lock = None
                _undo_preflight(run_dir, created, had_lock_file)
        error = distributed.broadcast_from_first(error, patient=True)
        if error is not None:
            raise TrmError(error) if world.is_first else RankZeroStopped(error)
        if not world.is_first:
            _check_shared_data(spec, run_dir, world)
            plan, data_dir, budget = _plan(options, pm, spec, run_dir, build=False, log=log)
            plan = _adopt_first_spec(plan, world, log)
            max_steps = _adopt_first_max_steps(max_steps, world, log)
        else:
            distributed.broadcast_from_first((plan.spec.arch, plan.spec.train, plan.spec.data))
            distributed.broadcast_from_first(max_steps)
        assert plan is not None and data_dir is not None
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
        )
        summary = trainer.fit()
    finally:
        if lock is not None:
            lock.close()
    if summary["stopped"] in STOPPED_BY_SIGNAL:
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
    return Run(dir=run_dir, summary=summary)


def _plan(
    options: RunOptions,
    pm: TrmPluginManager,
    spec: RunSpec,
    run_dir: Path,
    build: bool,
    log: Log,
) -> tuple[Plan, Path, BudgetPlan | None]:
    """Fit the spec to this machine (this rank), show what changed, plan the steps of a time
    budget (rank 0; the others adopt its spec), find or build the data."""
    plan = plan_run(pm, spec, options.mode, run_dir, log=log, build_data=build)
    for line in (*plan.runtime.notes, *(c.describe() for c in plan.changes)):
        log(line)
    if plan.runtime.reuse_host_memory:
        log("host memory: freed blocks are kept for reuse (resident memory stays at its peak)")
    if options.mode == "extreme":
        log(f"warning: {EXTREME_RISKS}")
    budget = None
    if build:
        timer = functools.partial(time_depths, requested_plugins=options.plugins, log=log)
        given = given_steps(options.max_steps, options.overrides)
        plan, budget = plan_steps(pm, plan, run_dir, options.resume, given, timer, log)
    data_dir = ensure_dataset(pm, plan.spec, run_dir, log)
    if build:
        check_checkpoint_room(run_dir, plan.spec, plan.dataset)
    return plan, data_dir, budget


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


def _adopt_first_spec(plan: Plan, world: World, log: Log) -> Plan:
    """Train what rank 0 planned: its [arch], [train] and [data] (a tier may have changed
    them for rank 0's memory); this rank keeps its own runtime."""
    arch, train_, data = distributed.broadcast_from_first(None)
    spec = plan.spec
    if (arch, train_, data) == (spec.arch, spec.train, spec.data):
        return plan
    log(f"warning: rank {world.rank} planned another model or schedule; training rank 0's")
    return attrs.evolve(plan, spec=attrs.evolve(spec, arch=arch, train=train_, data=data))


def _adopt_first_max_steps(max_steps: int | None, world: World, log: Log) -> int | None:
    """Stop where rank 0 stops: ``--max-steps`` given differently to the ranks would leave
    some waiting for the others' next step until the collective timeout."""
    first = distributed.broadcast_from_first(None)
    if first != max_steps:
        log(
            f"warning: rank {world.rank} was given --max-steps {max_steps or 'none'}; every "
            f"rank stops where rank 0 does (--max-steps {first or 'none'})"
        )
    return first


@contextmanager
def _quiet_stdout(quiet: bool) -> Iterator[None]:
    """Send this process's stdout (the progress display) to nowhere when ``quiet``."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w", encoding="utf-8") as sink, redirect_stdout(sink):
        yield
