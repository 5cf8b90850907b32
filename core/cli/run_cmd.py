"""``trm run SPEC``: resolve the spec, fit it to the machine, train.

Before training a preflight checks that the run directory is writable, that no other trm
process trains into it, and that it has room for the checkpoints the run keeps. A stop by
SIGINT/SIGTERM ends with a checkpoint, the command that resumes, and exit code 130.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
from pathlib import Path
from typing import IO

import attrs

from trm.checkpoint_schedule import parse_interval
from trm.cli.output import info
from trm.data.puzzle_dataset import open_split
from trm.errors import TrmError
from trm.plugin_manager import load_plugins
from trm.prepare import (
    EXTREME_RISKS,
    MODES,
    adapt_spec,
    choose_runtime,
    detect_hardware,
    ensure_dataset,
    estimate_memory,
)
from trm.spec import RunSpec, apply_overrides, load_spec, resolve_spec_path, spec_to_toml
from trm.state import estimate_checkpoint_bytes
from trm.train import Trainer, dataset_shape

MIN_FREE_BYTES = 64 * 2**20
MIN_CHECKPOINTS_ROOM = 3
EXIT_STOPPED = 130
LOCK_FILE = ".lock"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("run", parents=[common], help="train a run spec")
    parser.add_argument("spec", help="a TOML file or the name of a shipped spec (quickstart)")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="balanced",
        help="memory tier to fit the run to (default balanced)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec value, e.g. --set train.lr=3e-4; repeatable",
    )
    parser.add_argument("--out", type=Path, help="run directory (default runs/<spec name>)")
    parser.add_argument(
        "--resume", default="auto", help="auto (newest valid checkpoint in --out), never, or a path"
    )
    parser.add_argument(
        "--max-steps",
        type=positive_int,
        help="stop after this many optimizer steps (the lr schedule is kept)",
    )
    parser.add_argument(
        "--checkpoint-every",
        metavar="N|DURATION",
        help="checkpoint every N steps or every DURATION (90s, 10m, 1h); default "
        "train.checkpoint_interval_steps, else about every 10 minutes",
    )
    parser.set_defaults(func=run)


def preflight(run_dir: Path) -> None:
    """The run directory must be creatable, writable and have some room."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise TrmError(
            f"run directory {run_dir} is not writable ({exc.strerror or exc}); "
            "choose another with --out"
        ) from exc
    free = shutil.disk_usage(run_dir).free
    if free < MIN_FREE_BYTES:
        raise TrmError(f"only {free // 2**20} MiB free at {run_dir}; free space or use --out")


def preflight_checkpoint_room(run_dir: Path, spec: RunSpec, data_dir: Path) -> int:
    """Raise TrmError unless ``run_dir`` has room for the checkpoints; returns one's bytes.

    Room is needed for ``max(3, checkpoint_keep + 1)`` checkpoints (the kept ones plus the
    one being written), less what the run's existing checkpoints already occupy.
    """
    shape = dataset_shape(open_split(data_dir / spec.data.train_split).metadata)
    one_bytes = estimate_checkpoint_bytes(spec, shape)
    copies = max(MIN_CHECKPOINTS_ROOM, spec.train.checkpoint_keep + 1)
    folder = run_dir / "checkpoints"
    existing = sum(p.stat().st_size for p in folder.glob("step-*.pt")) if folder.is_dir() else 0
    needed = max(one_bytes, copies * one_bytes - existing)
    free = shutil.disk_usage(run_dir).free
    if free < needed:
        raise TrmError(
            f"{run_dir} has {free / 2**20:.0f} MiB free but the run's checkpoints need about "
            f"{needed / 2**20:.0f} MiB ({copies} of ~{one_bytes / 2**20:.1f} MiB); free space, "
            "lower train.checkpoint_keep or choose another --out"
        )
    return one_bytes


def lock_run_dir(run_dir: Path) -> IO[str] | None:
    """Hold an exclusive lock on ``run_dir`` for this process's life (POSIX; else no-op)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    handle = (run_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise TrmError(
            f"{run_dir} is in use by another trm run ({holder}); wait for it or use another --out"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


def resume_command(args: argparse.Namespace, run_dir: Path) -> str:
    """The command line that continues this run."""
    words = ["trm", "run", str(args.spec), "--out", str(run_dir)]
    for text in args.plugins:
        words += ["--plugins", text]
    if args.mode != "balanced":
        words += ["--mode", args.mode]
    for text in args.set:
        words += ["--set", text]
    if args.max_steps:
        words += ["--max-steps", str(args.max_steps)]
    if args.checkpoint_every:
        words += ["--checkpoint-every", args.checkpoint_every]
    return shlex.join(words)


def run(args: argparse.Namespace) -> int:
    if args.resume not in ("auto", "never") and not Path(args.resume).exists():
        raise TrmError(f"--resume {args.resume}: no such checkpoint file or run directory")
    interval = parse_interval(args.checkpoint_every) if args.checkpoint_every else None
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins)
    info(f"plugins on: {', '.join(pm.enabled_names())}")
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    for note in runtime.notes:
        info(note)
    default_dir = (args.out or Path("runs") / spec.name).expanduser()
    estimate = estimate_memory(pm, spec, hardware, runtime, log=info, run_dir=default_dir)
    spec, changes = adapt_spec(pm, spec, hardware, estimate, args.mode)
    for change in changes:
        info(f"adapted {change['key']}: {change['old']} -> {change['new']} ({change['reason']})")
    if any(change["key"].startswith("runtime.") for change in changes):
        runtime = choose_runtime(pm, spec, hardware)  # the tier may have set precision/threads
    if runtime.reuse_host_memory:
        info("host memory: freed blocks are kept for reuse (resident memory stays at its peak)")
    if args.mode == "extreme":
        info(f"warning: {EXTREME_RISKS}")

    run_dir = (args.out or Path("runs") / spec.name).expanduser()
    preflight(run_dir)
    lock = lock_run_dir(run_dir)
    try:
        (run_dir / "spec.toml").write_text(spec_to_toml(spec))
        (run_dir / "hardware.json").write_text(json.dumps(attrs.asdict(hardware), indent=2) + "\n")
        (run_dir / "adaptations.json").write_text(json.dumps(changes, indent=2) + "\n")
        data_dir = ensure_dataset(pm, spec, run_dir, info)
        preflight_checkpoint_room(run_dir, spec, data_dir)
        info(
            f"training {spec.name} on {runtime.device} ({runtime.precision}, "
            f"{runtime.threads} threads) into {run_dir}"
        )
        trainer = Trainer(
            spec,
            runtime,
            pm,
            run_dir,
            data_dir,
            info,
            resume=args.resume,
            max_steps=args.max_steps,
            checkpoint_interval=interval,
        )
        summary = trainer.fit()
    finally:
        if lock is not None:
            lock.close()
    if summary["stopped"] in ("interrupted", "terminated"):
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
    return 0
