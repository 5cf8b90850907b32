"""``trm run SPEC``: fit the spec to the machine, check the run directory, train.

A stop by SIGINT/SIGTERM ends with a checkpoint, the command that resumes, and exit code 130.
Under torchrun (``torchrun --nproc-per-node N -m trm run SPEC``) every process runs this
command as one rank of a data-parallel run; see docs/distributed.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TypeVar

import attrs

from trm.cli.common import (
    EXIT_OK,
    EXIT_STOPPED,
    RankZeroStopped,
    add_set_option,
    positive_int,
)
from trm.cli.output import info, set_rank
from trm.device import distributed
from trm.device.distributed import World
from trm.errors import TrmError
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
from trm.spec import RunSpec, apply_overrides, load_spec, resolve_spec_path
from trm.train import Trainer
from trm.train.checkpoints import parse_interval

T = TypeVar("T")


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("run", parents=[common], help="train a run spec")
    parser.add_argument("spec", help="a TOML file or the name of a shipped spec (quickstart)")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=DEFAULT_MODE,
        help=f"memory tier to fit the run to (default {DEFAULT_MODE})",
    )
    add_set_option(parser)
    parser.add_argument("--out", type=Path, help="run directory (default runs/<spec name>)")
    parser.add_argument(
        "--resume", default="auto", help="auto (newest valid checkpoint in --out), never, or a path"
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="with --resume never: delete the checkpoints and metrics of the run already in "
        "--out and start afresh (its built data are kept)",
    )
    parser.add_argument(
        "--max-steps",
        type=positive_int,
        help="stop once the run has taken this many optimizer steps in all, counting the "
        "steps of the checkpoint it resumes from (the lr schedule is kept)",
    )
    parser.add_argument(
        "--checkpoint-every",
        metavar="N|DURATION",
        help="checkpoint every N steps or every DURATION (90s, 10m, 1h); default "
        "train.checkpoint_interval_steps, else about every 10 minutes",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        metavar="CHECKPOINT",
        help="start a new run from these weights (a trm run or checkpoint, or a reference "
        "step_N file); the puzzle table of another dataset starts as its mean row",
    )
    parser.set_defaults(func=run)


def resume_command(args: argparse.Namespace, run_dir: Path, world: World | None = None) -> str:
    """The command line that continues this run (under torchrun, with torchrun: on several
    nodes, each node's own torchrun options apply)."""
    words = ["trm", "run", str(args.spec), "--out", str(run_dir)]
    if world is not None and world.distributed:
        words = ["torchrun", f"--nproc-per-node={world.local_size}"]
        if world.size != world.local_size:
            words.append(f"--nnodes={world.size // max(1, world.local_size)}")
        words += ["-m", "trm", "run", str(args.spec), "--out", str(run_dir)]
    for text in args.plugins:
        words += ["--plugins", text]
    if args.mode != DEFAULT_MODE:
        words += ["--mode", args.mode]
    for text in args.set:
        words += ["--set", text]
    if args.max_steps:
        words += ["--max-steps", str(args.max_steps)]
    # --resume and --replace are left out: the default (auto) continues this run
    if args.checkpoint_every:
        words += ["--checkpoint-every", args.checkpoint_every]
    if getattr(args, "init_from", None) is not None:  # ignored once the run has a checkpoint
        words += ["--init-from", str(args.init_from)]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    # one process unless torchrun started several; the backends name their process groups
    world = distributed.start(_device_backends(args))
    set_rank(world.rank)
    try:
        spec, interval, pm = _first_rank_decides(lambda: _read_input(args, world), world)
        with _quiet_stdout(not world.is_first):  # rank 0 alone shows progress
            return _run(args, spec, interval, world, pm)
    finally:
        distributed.finish()


def _device_backends(args: argparse.Namespace) -> list:
    """The device backends of the ``--plugins`` asked for, to start the process group with;
    none when the plugins cannot load (the error is reported once the ranks can agree on it,
    by :func:`_read_input`)."""
    try:
        return load_plugins(args.plugins).device_backends()
    except TrmError:
        return []


def _read_input(
    args: argparse.Namespace, world: World
) -> tuple[RunSpec, tuple[int, float] | None, TrmPluginManager]:
    """The spec (loaded, ``--set`` applied, checked), the checkpoint interval and the run's
    plugin manager (the spec's plugin tables switch theirs on); TrmError for bad input."""
    if args.resume not in ("auto", "never") and not Path(args.resume).exists():
        raise TrmError(f"--resume {args.resume}: no such checkpoint file or run directory")
    if args.init_from is not None and not args.init_from.exists():
        raise TrmError(f"--init-from {args.init_from}: no such checkpoint file or folder")
    if args.replace and args.resume != "never":
        raise TrmError("--replace starts afresh: use it with --resume never")
    interval = parse_interval(args.checkpoint_every) if args.checkpoint_every else None
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins, spec_tables=spec.plugins)
    check_device(pm, spec.runtime.device)  # an unclaimed device: refused before any write
    world.rows(spec.train.global_batch_size)  # TrmError unless it divides among the ranks
    return spec, interval, pm


def _first_rank_decides(check: Callable[[], T], world: World) -> T:
    """``check()`` on every rank; when it refuses rank 0's input, every rank stops: rank 0
    prints the error, the others exit quietly (:class:`RankZeroStopped`). A rank whose own
    check fails where rank 0's passed prints its error, tagged with its rank."""
    try:
        value, refused = check(), None
    except TrmError as exc:
        value, refused = None, exc
    first = distributed.broadcast_from_first(
        None if refused is None else str(refused), patient=True
    )
    if first is not None and not world.is_first:
        raise RankZeroStopped(first)
    if refused is not None:
        raise refused
    return value  # type: ignore[return-value]


def _run(
    args: argparse.Namespace,
    spec: RunSpec,
    interval: tuple[int, float] | None,
    world: World,
    pm: TrmPluginManager,
) -> int:
    """``trm run`` on one process, or on one rank of a torchrun job (see docs/distributed.md):
    rank 0 checks and locks the run directory, plans and builds the data while the others
    wait; then every rank plans for itself with rank 0's model and training settings."""
    info(f"plugins on: {pm.describe_enabled()}")
    if not pm.hook.save_checkpoint.get_hookimpls():
        info(
            "warning: no plugin saves checkpoints (is checkpoint switched off?): a crash or "
            "a stop loses everything this run trains"
        )
    if world.distributed and "distributed" not in pm.enabled_names():
        info(
            "warning: the distributed plugin is off: each rank plans as if it had the whole "
            "node (all its cores and memory)"
        )
    run_dir = default_run_dir(spec.name, args.out)
    _continue_after_restart(args, run_dir)
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
                check_reuse(run_dir, spec, args.resume, args.replace)
                plan, data_dir, budget = _plan(args, pm, spec, run_dir, build=True)
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
            plan, data_dir, budget = _plan(args, pm, spec, run_dir, build=False)
            plan = _adopt_first_spec(plan, world)
            args.max_steps = _adopt_first_max_steps(args.max_steps, world)
        else:
            distributed.broadcast_from_first((plan.spec.arch, plan.spec.train, plan.spec.data))
            distributed.broadcast_from_first(args.max_steps)
        assert plan is not None and data_dir is not None
        runtime = plan.runtime
        info(
            f"training {plan.spec.name} on {runtime.device} ({runtime.precision}, "
            f"{runtime.threads} thread{'s' if runtime.threads != 1 else ''}) into {run_dir}"
        )

        def accepted(_state: object) -> None:
            if not world.is_first:
                return
            if args.replace:
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
            info,
            resume=args.resume,
            max_steps=args.max_steps,
            checkpoint_interval=interval,
            on_accepted=accepted,
            reader=plan.reader,
            init_from=args.init_from,
        )
        summary = trainer.fit()
    finally:
        if lock is not None:
            lock.close()
    if summary["stopped"] not in ("interrupted", "terminated"):
        return EXIT_OK
    saved = summary.get("checkpoint_step")
    if saved == summary["steps"]:
        info(f"stopped after a checkpoint at step {saved}")
    elif saved is not None:
        info(
            f"stopped at step {summary['steps']}, but its checkpoint failed; "
            f"the checkpoint of step {saved} is intact"
        )
    else:
        info(f"stopped at step {summary['steps']} without a checkpoint")
    info(f"resume with: {resume_command(args, run_dir, world)}")
    return EXIT_STOPPED


def _plan(
    args: argparse.Namespace, pm: TrmPluginManager, spec: RunSpec, run_dir: Path, build: bool
) -> tuple[Plan, Path, BudgetPlan | None]:
    """Fit the spec to this machine (this rank), show what changed, plan the steps of a time
    budget (rank 0; the others adopt its spec), find or build the data."""
    plan = plan_run(pm, spec, args.mode, run_dir, log=info, build_data=build)
    for line in (*plan.runtime.notes, *(c.describe() for c in plan.changes)):
        info(line)
    if plan.runtime.reuse_host_memory:
        info("host memory: freed blocks are kept for reuse (resident memory stays at its peak)")
    if args.mode == "extreme":
        info(f"warning: {EXTREME_RISKS}")
    budget = None
    if build:
        timer = functools.partial(time_depths, requested_plugins=args.plugins, log=info)
        given = given_steps(args.max_steps, args.set)
        plan, budget = plan_steps(pm, plan, run_dir, args.resume, given, timer, info)
    data_dir = ensure_dataset(pm, plan.spec, run_dir, info)
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


def _continue_after_restart(args: argparse.Namespace, run_dir: Path) -> None:
    """After torchrun restarted the job (``--max-restarts``), continue from the run's newest
    checkpoint: ``--resume never``/``--replace``/a path meant the first attempt."""
    restarts = distributed.restart_count()
    if restarts == 0 or args.resume == "auto":
        return
    if not inspect_run_dir(run_dir).checkpoint_steps:
        return
    info(
        f"torchrun restart {restarts}: continuing from the newest checkpoint in {run_dir} "
        f"(--resume {args.resume} applied to the first attempt)"
    )
    args.resume, args.replace = "auto", False


def _check_shared_data(spec: RunSpec, run_dir: Path, world: World) -> None:
    """A rank other than 0 must see the data rank 0 built (a filesystem shared by the nodes)."""
    if spec.data.dir or (run_dir / "data" / BUILD_RECORD).exists():
        return
    raise TrmError(
        f"rank {world.rank} does not see the data rank 0 built in {run_dir / 'data'}: on "
        "several nodes the run directory must be on a filesystem every node shares (--out), "
        "or set data.dir to a dataset present on every node"
    )


def _adopt_first_spec(plan: Plan, world: World) -> Plan:
    """Train what rank 0 planned: its [arch], [train] and [data] (a tier may have changed
    them for rank 0's memory); this rank keeps its own runtime."""
    arch, train, data = distributed.broadcast_from_first(None)
    spec = plan.spec
    if (arch, train, data) == (spec.arch, spec.train, spec.data):
        return plan
    info(f"warning: rank {world.rank} planned another model or schedule; training rank 0's")
    return attrs.evolve(plan, spec=attrs.evolve(spec, arch=arch, train=train, data=data))


def _adopt_first_max_steps(max_steps: int | None, world: World) -> int | None:
    """Stop where rank 0 stops: ``--max-steps`` given differently to the ranks would leave
    some waiting for the others' next step until the collective timeout."""
    first = distributed.broadcast_from_first(None)
    if first != max_steps:
        info(
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
