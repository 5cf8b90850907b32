"""The run directory before training: writable, locked to one process, not holding another
run that this one would train over, room for checkpoints, and the files that describe the run
(spec.toml, hardware.json, adaptations.json) — written only once the run is accepted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch
from attrs import frozen

from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.file_lock import HeldLock, hold_lock, lock_holder
from trm.plan.pipeline import Plan
from trm.spec import RunSpec, load_spec, spec_to_toml

if TYPE_CHECKING:
    from trm.model import DenseOptimizer

MIN_FREE_BYTES = 64 * 2**20
MIN_CHECKPOINTS_ROOM = 3
LOCK_FILE = ".lock"
# Checkpoint bytes beyond the tensors (spec, pickle framing, zip directory), a generous bound.
CHECKPOINT_OVERHEAD_BYTES = 1 << 20


# What a run writes into its directory (besides its built data, kept by --replace).
RUN_FILES = (
    "metrics.jsonl",
    "summary.json",
    "spec.toml",
    "hardware.json",
    "adaptations.json",
    "estimate.json",
    "budget.json",  # the steps a time budget planned (trm.plan.budget)
)
CHECKPOINTS = "checkpoints"


@frozen
class ExistingRun:
    """What a run directory already holds: checkpoints (the newest's step) and metrics."""

    name: str | None
    checkpoint_steps: tuple[int, ...]
    has_metrics: bool

    @property
    def holds_work(self) -> bool:
        return bool(self.checkpoint_steps) or self.has_metrics

    def describe(self) -> str:
        name = f"the run {self.name!r}" if self.name else "a run"
        if not self.checkpoint_steps:
            return f"{name} (metrics, no checkpoint)"
        count = len(self.checkpoint_steps)
        return f"{name} ({count} checkpoint(s), the newest at step {max(self.checkpoint_steps)})"


def inspect_run_dir(run_dir: Path) -> ExistingRun:
    """What ``run_dir`` holds (nothing when it does not exist)."""
    folder = run_dir / CHECKPOINTS
    steps: list[int] = []
    if folder.is_dir():
        for path in folder.glob("step-*.pt"):
            digits = path.name[5:-3]
            if digits.isdigit():
                steps.append(int(digits))
    name = None
    try:
        name = load_spec(run_dir / "spec.toml").name
    except Exception:  # no spec, or one this version cannot read: the name is unknown
        name = None
    return ExistingRun(name, tuple(sorted(steps)), (run_dir / "metrics.jsonl").exists())


def check_reuse(run_dir: Path, spec: RunSpec, resume: str, replace: bool) -> ExistingRun:
    """Refuse, before anything is built or written, a run that would train over another.

    ``--resume never`` into a directory holding a run is refused unless ``replace``. A
    resume of a run whose data were built from another recipe is refused too: it would
    rebuild the run's data. Returns what the directory holds.
    """
    existing = inspect_run_dir(run_dir)
    if not existing.holds_work:
        return existing
    if resume == "never":
        if not replace:
            raise TrmError(
                f"{run_dir} holds {existing.describe()}; --resume never would train over it. "
                "Continue it with --resume auto, choose another --out, or add --replace to "
                "delete its checkpoints and metrics and start afresh"
            )
        return existing
    if spec.data.dir or not existing.checkpoint_steps:
        return existing
    try:
        recorded = load_spec(run_dir / "spec.toml")
    except TrmError:
        return existing
    if _recipe(recorded) != _recipe(spec):
        raise TrmError(
            f"{run_dir} holds {existing.describe()} trained on data built from another "
            "recipe ([data] or train.seed differ); resuming would rebuild its data. Resume "
            "with the spec it was trained with, choose another --out, or start afresh with "
            "--resume never --replace"
        )
    return existing


def _recipe(spec: RunSpec) -> tuple:
    """What built data depend on (not how they are read: reader, prefetch, eval split)."""
    data = spec.data
    return (data.source, data.dir, data.train_split, data.generate, data.mix, spec.train.seed)


def clear_run(run_dir: Path) -> None:
    """Delete a run's checkpoints, metrics and record (``--replace``); its data stay."""
    shutil.rmtree(run_dir / CHECKPOINTS, ignore_errors=True)
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)


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


def lock_run_dir(run_dir: Path) -> HeldLock:
    """Hold an exclusive lock on ``run_dir`` for this process's life (:func:`hold_lock`);
    TrmError naming the holder when another process holds it."""
    lock = hold_lock(run_dir / LOCK_FILE)
    if lock is None:
        raise TrmError(
            f"{run_dir} is in use by another trm run ({lock_holder(run_dir / LOCK_FILE)}); "
            "wait for it or use another --out"
        )
    return lock


def estimate_checkpoint_bytes(
    spec: RunSpec, dataset: DatasetShape, optimizer: DenseOptimizer | None = None
) -> int:
    """An upper estimate of one checkpoint's size on disk for ``spec`` on that dataset.

    Builds the model on the meta device (no memory), then counts its state dict, the EMA
    shadows (trainable parameters), the dense optimizer's state (``optimizer``'s
    ``state_bytes_for`` the trainable parameters; None: the built-in entry
    ``train.optimizer`` names), the carry (z_H and each latent candidate's z_L for the
    global batch, plus its data rows) and a fixed overhead.
    """
    from trm.model import BUILT_IN_OPTIMIZERS, TinyRecursiveModel, choose_dense_optimizer

    if optimizer is None:
        optimizer = choose_dense_optimizer(BUILT_IN_OPTIMIZERS, spec.train.optimizer)

    with torch.device("meta"):
        model = TinyRecursiveModel(spec.arch, **dataset.model_kwargs())
    state = model.state_dict()
    model_bytes = sum(t.numel() * t.element_size() for t in state.values())
    trainable_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    shapes = [(name, tuple(p.shape)) for name, p in model.named_parameters() if p.requires_grad]
    ema_bytes = trainable_bytes if spec.train.ema else 0
    batch = spec.train.global_batch_size
    states = 1 + spec.train.latent_candidates  # z_H and one z_L per latent candidate
    carry_bytes = states * batch * model.num_positions * spec.arch.hidden_size * 4
    carry_bytes += batch * (2 * dataset.seq_len + 1 + 1 + 1) * 8
    optimizer_bytes = optimizer.state_bytes_for(shapes)
    return model_bytes + ema_bytes + optimizer_bytes + carry_bytes + CHECKPOINT_OVERHEAD_BYTES


def check_checkpoint_room(
    run_dir: Path, spec: RunSpec, dataset: DatasetShape, optimizer: DenseOptimizer | None = None
) -> int:
    """Raise TrmError unless ``run_dir`` has room for the checkpoints; returns one's bytes
    (``optimizer``: as :func:`estimate_checkpoint_bytes` takes it).

    Room is needed for ``max(3, checkpoint_keep + 1)`` checkpoints (the kept ones plus the
    one being written), less what the run's existing checkpoints already occupy.
    """
    one_bytes = estimate_checkpoint_bytes(spec, dataset, optimizer)
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


def estimate_record(plan: Plan) -> dict[str, Any]:
    """estimate.json, in the field names of ``trm estimate --json``: the planned run's
    predicted peak per location, the budgets and the items (``trm report`` draws the
    measured memory against it)."""
    estimate = plan.estimate
    return {
        "host_total_bytes": estimate.total_bytes("host"),
        "device_total_bytes": estimate.total_bytes("device"),
        "host_budget_bytes": estimate.host_budget_bytes,
        "device_budget_bytes": estimate.device_budget_bytes,
        "unified_memory": estimate.unified_memory,
        "mode": plan.mode,
        "items": [attrs.asdict(item) for item in estimate.items],
    }


def write_run_record(run_dir: Path, plan: Plan) -> None:
    """spec.toml (the adapted spec), hardware.json, adaptations.json and estimate.json."""
    (run_dir / "spec.toml").write_text(spec_to_toml(plan.spec), encoding="utf-8")
    hardware = json.dumps(attrs.asdict(plan.hardware), indent=2)
    (run_dir / "hardware.json").write_text(hardware + "\n", encoding="utf-8")
    changes = json.dumps([attrs.asdict(c) for c in plan.changes], indent=2, default=str)
    (run_dir / "adaptations.json").write_text(changes + "\n", encoding="utf-8")
    estimate = json.dumps(estimate_record(plan), indent=2)
    (run_dir / "estimate.json").write_text(estimate + "\n", encoding="utf-8")
