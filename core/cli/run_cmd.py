"""``trm run SPEC``: resolve the spec, fit it to the machine, train."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import attrs

from trm.cli.output import info
from trm.errors import TrmError
from trm.plugin_manager import load_plugins
from trm.prepare import (
    MODES,
    adapt_spec,
    choose_runtime,
    detect_hardware,
    ensure_dataset,
    estimate_memory,
)
from trm.spec import apply_overrides, load_spec, resolve_spec_path, spec_to_toml
from trm.train import Trainer

MIN_FREE_BYTES = 64 * 2**20


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
            f"run directory {run_dir} is not writable ({exc.strerror}); choose another with --out"
        ) from exc
    free = shutil.disk_usage(run_dir).free
    if free < MIN_FREE_BYTES:
        raise TrmError(f"only {free // 2**20} MiB free at {run_dir}; free space or use --out")


def run(args: argparse.Namespace) -> int:
    if args.resume not in ("auto", "never") and not Path(args.resume).exists():
        raise TrmError(f"--resume {args.resume}: no such checkpoint file or run directory")
    spec = apply_overrides(load_spec(resolve_spec_path(args.spec)), args.set)
    pm = load_plugins(args.plugins)
    info(f"plugins on: {', '.join(pm.enabled_names())}")
    hardware = detect_hardware(pm)
    runtime = choose_runtime(pm, spec, hardware)
    for note in runtime.notes:
        info(note)
    estimate = estimate_memory(pm, spec, hardware, runtime)
    spec, changes = adapt_spec(pm, spec, hardware, estimate, args.mode)
    for change in changes:
        info(f"adapted {change['key']}: {change['old']} -> {change['new']} ({change['reason']})")

    run_dir = (args.out or Path("runs") / spec.name).expanduser()
    preflight(run_dir)
    (run_dir / "spec.toml").write_text(spec_to_toml(spec))
    (run_dir / "hardware.json").write_text(json.dumps(attrs.asdict(hardware), indent=2) + "\n")
    (run_dir / "adaptations.json").write_text(json.dumps(changes, indent=2) + "\n")
    data_dir = ensure_dataset(pm, spec, run_dir, info)
    info(
        f"training {spec.name} on {runtime.device} ({runtime.precision}, "
        f"{runtime.threads} threads) into {run_dir}"
    )
    trainer = Trainer(
        spec, runtime, pm, run_dir, data_dir, info, resume=args.resume, max_steps=args.max_steps
    )
    summary = trainer.fit()
    if summary["stopped"] in ("interrupted", "terminated"):
        info(
            f"stopped after a checkpoint at step {summary['steps']}; resume with: "
            f"trm run {args.spec} --out {run_dir}"
        )
        return 130
    return 0
