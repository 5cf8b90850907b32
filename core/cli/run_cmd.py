"""``trm run SPEC``: fit the spec to the machine, check the run directory, train.

A stop by SIGINT/SIGTERM ends with a checkpoint, the command that resumes, and exit code 130.
Under torchrun (``torchrun --nproc-per-node N -m trm run SPEC``) every process runs this
command as one rank of a data-parallel run; see docs/distributed.md.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from trm.api.training import STOPPED_BY_SIGNAL, RunOptions, run_training
from trm.cli.common import (
    EXIT_OK,
    EXIT_STOPPED,
    add_set_option,
    out_folder,
    positive_int,
)
from trm.cli.output import info
from trm.device.distributed import World, env_world
from trm.memory import DEFAULT_MODE, MODES


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
    parser.add_argument("--out", type=out_folder, help="run directory (default runs/<spec name>)")
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
        help="start a new run from these weights (a trm run or checkpoint, a model folder of "
        "trm export --format hf, or a reference step_N file); the puzzle table of another "
        "dataset starts as its mean row",
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
    """Parse into :class:`~trm.api.training.RunOptions`, train through the API, and on a
    stop by a signal print the command that resumes (exit 130)."""
    options = RunOptions(
        spec=args.spec,
        plugins=tuple(args.plugins),
        mode=args.mode,
        overrides=tuple(args.set),
        out=args.out,
        resume=args.resume,
        replace=args.replace,
        max_steps=args.max_steps,
        checkpoint_every=args.checkpoint_every,
        init_from=args.init_from,
    )
    result = run_training(options, info)
    if result.stopped not in STOPPED_BY_SIGNAL:
        return EXIT_OK
    info(f"resume with: {resume_command(args, result.path, env_world())}")
    return EXIT_STOPPED
