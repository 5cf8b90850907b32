"""``trm run SPEC``: fit the spec to the machine, check the run directory, train.

A stop by SIGINT/SIGTERM ends with a checkpoint, the command that resumes, and exit code 130.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from trm.cli.common import EXIT_OK, EXIT_STOPPED, add_set_option, positive_int
from trm.cli.output import info
from trm.errors import TrmError
from trm.memory import DEFAULT_MODE, EXTREME_RISKS, MODES
from trm.paths import default_run_dir
from trm.plan import plan_run
from trm.plan.dataset import ensure_dataset
from trm.plan.run_dir import (
    check_checkpoint_room,
    check_reuse,
    clear_run,
    lock_run_dir,
    preflight,
    write_run_record,
)
from trm.plugin_manager import load_plugins
from trm.spec import apply_overrides, load_spec, resolve_spec_path
from trm.train import Trainer
from trm.train.checkpoints import parse_interval


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
    parser.set_defaults(func=run)


def resume_command(args: argparse.Namespace, run_dir: Path) -> str:
    """The command line that continues this run."""
    words = ["trm", "run", str(args.spec), "--out", str(run_dir)]
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
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    if args.resume not in ("auto", "never") and not Path(args.resume).exists():
        raise TrmError(f"--resume {args.resume}: no such checkpoint file or run directory")
    if args.replace and args.resume != "never":
        raise TrmError("--replace starts afresh: use it with --resume never")
    interval = parse_interval(args.checkpoint_every) if args.checkpoint_every else None
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins)
    info(f"plugins on: {', '.join(pm.enabled_names())}")
    if not pm.hook.save_checkpoint.get_hookimpls():
        info(
            "warning: no plugin saves checkpoints (is checkpoint switched off?): a crash or "
            "a stop loses everything this run trains"
        )
    run_dir = default_run_dir(spec.name, args.out)
    preflight(run_dir)
    lock = lock_run_dir(run_dir)
    try:
        check_reuse(run_dir, spec, args.resume, args.replace)
        plan = plan_run(pm, spec, args.mode, run_dir, log=info, build_data=True)
        for line in (*plan.runtime.notes, *(c.describe() for c in plan.changes)):
            info(line)
        if plan.runtime.reuse_host_memory:
            info("host memory: freed blocks are kept for reuse (resident memory stays at its peak)")
        if args.mode == "extreme":
            info(f"warning: {EXTREME_RISKS}")
        data_dir = ensure_dataset(pm, plan.spec, run_dir, info)
        check_checkpoint_room(run_dir, plan.spec, plan.dataset)
        runtime = plan.runtime
        info(
            f"training {plan.spec.name} on {runtime.device} ({runtime.precision}, "
            f"{runtime.threads} threads) into {run_dir}"
        )

        def accepted(_state: object) -> None:
            if args.replace:
                clear_run(run_dir)
            write_run_record(run_dir, plan)

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
    info(f"resume with: {resume_command(args, run_dir)}")
    return EXIT_STOPPED
