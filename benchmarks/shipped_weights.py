"""Regenerate the shipped models (``trm.weights``): train each by its recipe, reduce its best
checkpoint to ``NAME.pt``, score it on each held-out puzzle kind, write ``NAME.json``.

Usage:
  python benchmarks/shipped_weights.py [--only NAME] [--out DIR] [--work DIR] [--json]
  python benchmarks/shipped_weights.py --only NAME --from-run RUN_DIR --command "trm run …"
      [--commit SHA] [--out DIR] [--json]
  python benchmarks/shipped_weights.py --only NAME --rescore [--out DIR] [--json]

For each model of ``RECIPES`` (or only ``--only NAME``):

1. train: ``trm run …`` as a subprocess into ``WORK/NAME`` (default ``runs/shipped/NAME``),
   its exact command recorded; or, with ``--from-run RUN_DIR``, take a finished run instead
   (``--command`` says the command that made it: a run directory does not record it);
2. reduce the run's best checkpoint (``checkpoints/best.json``; else its newest) with
   ``trm.restore.reduce_checkpoint`` — the EMA weights, the spec, the dataset shape,
   the recursion in force — and write ``OUT/NAME.pt`` (default ``OUT``: the package folder
   ``weights/``), checked to load with ``torch.load(weights_only=True)``;
3. score those reduced weights on each puzzle kind of the recipe: the run's ``[data.generate]``
   with the kind's overrides, built with the kind's seed (the run's own seed when the kind
   gives none: then it is the run's own held-out test split), the first ``count`` examples of
   its test split (``trm.plugins.evaluation.held_out.score_kind``, as ``trm eval NAME`` does);
4. write ``OUT/NAME.json``, the manifest (``trm.shipped.Manifest``): command, seed, commit
   (``git rev-parse HEAD`` here, ``-dirty`` when tracked files differ from it; ``--commit``
   for a run made at another commit), machine (the run's hardware.json: the CPU as lscpu
   names it, its cores; the device from summary.json), steps and wall time (summary.json),
   the kinds' accuracies, and the .pt file's SHA-256 and size.

With ``--rescore`` nothing is trained or reduced: the shipped ``OUT/NAME.pt`` (checked
against its manifest's SHA-256) is scored on the recipe's kinds as in step 3, and
``OUT/NAME.json`` is written again with those kinds in place of its old ones; the rest of the
manifest (how the model was trained, the file's SHA-256) is kept as it was.

The first kind of each recipe is fresh puzzles (a seed other than the run's): the shipped
checkpoint is the run's best evaluation on its own held-out split, so its score there is the
split it was chosen on, kept beside as a kind that says so.

Prints a table (model, step, size, kind, examples, exact and cell accuracy) or, with
``--json``, one document: ``{"models": [manifest, …]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import torch
from attrs import define, field
from tables import print_rows

import trm
from trm.checkpoint_file import load_weights_only
from trm.errors import TrmError
from trm.plugin_manager import load_plugins
from trm.plugins.evaluation.held_out import kind_options, score_kind
from trm.plugins.operations.checkpoint import best_checkpoint, list_checkpoints
from trm.restore import checkpoint_spec, reduce_checkpoint, restore_model
from trm.shipped import (
    KindAccuracy,
    Machine,
    Manifest,
    check_file,
    file_sha256,
    read_manifest,
    shipped_dir,
)

REPO = Path(__file__).resolve().parent.parent
EVAL_BATCH = 256


@define(frozen=True)
class KindRecipe:
    """A kind of held-out puzzle a shipped model is scored on: the run's ``[data.generate]``
    with ``overrides`` applied, built with ``seed`` (None: the run's own seed, so its test
    split is the run's held-out split), the first ``count`` test examples scored."""

    name: str
    overrides: dict[str, Any] = field(factory=dict)
    seed: int | None = None
    count: int = 1000


@define(frozen=True)
class ShippedRecipe:
    """How a shipped model is made: ``trm run`` with ``run_args`` (``--out`` is added), and
    what it is scored on. ``trained_on`` and ``puzzle`` are the manifest's words."""

    name: str
    description: str
    trained_on: str
    puzzle: str
    run_args: list[str]
    kinds: list[KindRecipe]


def _set_args(*assignments: str) -> list[str]:
    """``--set KEY=VALUE`` for each assignment, as ``trm run`` arguments."""
    return [arg for assignment in assignments for arg in ("--set", assignment)]


# Overrides that make a 9x9 kind's build cheap and plain: one train puzzle, no augmentation,
# one clue count (no range) and no minimal carving unless the kind asks for it.
_FRESH_9X9 = {"count": 1, "test_count": 1000, "augment": 0, "min_clues": 0, "minimal": 0.0}

RECIPES = {
    recipe.name: recipe
    for recipe in (
        ShippedRecipe(
            name="quickstart",
            description="the quickstart: a TRM (MLP variant, hidden 64) for 4x4 Sudoku",
            trained_on=(
                "3,000 generated 4x4 Sudoku puzzles with 6 clues each (specs/quickstart.toml, "
                "seed 0), 800 steps of 128 puzzles"
            ),
            puzzle="4x4 Sudoku (16 cells)",
            run_args=["quickstart"],
            kinds=[
                # Fresh puzzles (seed 1; the run trained on seed 0's). 4x4 grids are few: 2 of
                # these 500 are also puzzles of the run's train split.
                KindRecipe(
                    "4x4, 6 clues, fresh (seed 1)",
                    {"count": 1, "test_count": 500},
                    seed=1,
                    count=500,
                ),
                # The run's own held-out split, on which its best checkpoint was chosen.
                KindRecipe("4x4, 6 clues, the split the checkpoint was chosen on", count=500),
            ],
        ),
        ShippedRecipe(
            name="sudoku9-laptop",
            description="the laptop recipe: a TRM (MLP variant, hidden 64) for 9x9 Sudoku",
            trained_on=(
                "10,000 generated 9x9 Sudoku puzzles with 25 to 30 clues, half of them carved "
                "to minimal puzzles, 9 augmented copies each (specs/sudoku9-laptop.toml, "
                "seed 0), with the staged curriculum"
            ),
            puzzle="9x9 Sudoku (81 cells)",
            run_args=["sudoku9-laptop"],
            kinds=[
                # Fresh puzzles (seed 1; the run trained on seed 0's), generated alone: one
                # train puzzle is built beside them, so only the test split costs time.
                KindRecipe("30 clues", _FRESH_9X9 | {"clues": 30}, seed=1, count=1000),
                KindRecipe(
                    "minimal",
                    _FRESH_9X9 | {"clues": 30, "minimal": 1.0, "test_count": 500},
                    seed=1,
                    count=500,
                ),
            ],
        ),
        ShippedRecipe(
            name="maze-small",
            description="a laptop maze model: a TRM (MLP variant, hidden 64) for 6x6 mazes",
            trained_on=(
                "20,000 generated 6x6 mazes with 4 to 9 walls and shortest paths of at least 4 "
                "steps (specs/maze-small.toml with 20,000 mazes, seed 0), 25 minutes of "
                "training steps of 128 mazes"
            ),
            puzzle="6x6 maze (36 cells)",
            run_args=[
                "maze-small",
                *_set_args(
                    "train.time_budget_s=1500",
                    "data.generate.count=20000",
                    "data.generate.test_count=1000",
                    "train.eval_interval=1000",
                    "train.eval_max_examples=1000",
                    "train.lr_warmup_steps=200",
                ),
            ],
            kinds=[
                # Fresh mazes (seed 1; the run trained on seed 0's).
                KindRecipe(
                    "6x6 mazes, fresh (seed 1)",
                    {"count": 1, "test_count": 1000},
                    seed=1,
                    count=1000,
                ),
                # The run's own held-out split, on which its best checkpoint was chosen.
                KindRecipe("6x6 mazes, the split the checkpoint was chosen on", count=1000),
            ],
        ),
    )
}


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def current_commit() -> str:
    """HEAD of this repository, with ``-dirty`` when tracked files differ from it."""
    try:
        head = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrmError(f"{path} cannot be read ({exc}); is it a finished `trm run`?") from None
    if not isinstance(data, dict):
        raise TrmError(f"{path} is not a JSON object; is it a finished `trm run`?")
    return data


def train(recipe: ShippedRecipe, run_dir: Path) -> str:
    """Run the recipe's ``trm run`` into ``run_dir`` (which must be new: an old run there
    would be resumed); the exact command, as one line."""
    if run_dir.exists() and any(run_dir.iterdir()):
        raise TrmError(
            f"{run_dir} exists and is not empty; remove it, choose another --work, or ship "
            f"that run with --from-run {run_dir}"
        )
    command = ["trm", "run", *recipe.run_args, "--out", str(run_dir)]
    line = shlex.join(command)
    print(f"shipped_weights: {line}", file=sys.stderr)
    runner = [sys.executable, "-m", "trm", *command[1:]]
    done = subprocess.run(runner, check=False)
    if done.returncode != 0:
        raise TrmError(f"`{line}` failed with exit code {done.returncode}; see its output above")
    return line


def machine_of(run_dir: Path, summary: dict[str, Any]) -> Machine:
    """The machine a run trained on, from its hardware.json and summary.json."""
    hardware = _read_json(run_dir / "hardware.json")
    return Machine(
        cpu_model=str(hardware.get("cpu_model") or "unknown"),
        physical_cores=hardware.get("physical_cores"),
        logical_cores=hardware.get("logical_cores"),
        device=device_words(str(summary.get("device") or "unknown"), hardware),
    )


def device_words(device: str, hardware: dict[str, Any]) -> str:
    """``device`` with its accelerator's name when hardware.json has one (``cuda:0 (NVIDIA
    H200)``); a CPU device, or one the record does not name, as it is."""
    kind, _, index = device.partition(":")
    for accelerator in hardware.get("accelerators") or []:
        same = accelerator.get("kind") == kind and str(accelerator.get("index", 0)) == (
            index or "0"
        )
        if same and accelerator.get("name"):
            return f"{device} ({accelerator['name']})"
    return device


def chosen_checkpoint(run_dir: Path) -> Path:
    """The run's best checkpoint, else its newest; TrmError when it has none."""
    best = best_checkpoint(run_dir)
    if best is not None:
        return best
    found = list_checkpoints(run_dir)
    if not found:
        raise TrmError(f"{run_dir} holds no checkpoints/step-*.pt; is it a `trm run` directory?")
    return found[-1]


def write_reduced(payload: dict[str, Any], path: Path) -> dict[str, Any]:
    """Write the reduced ``payload`` to ``path`` (through a temporary file) and read it back
    with ``weights_only=True``; the payload as loaded."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(payload, temporary)
    os.replace(temporary, path)
    return load_weights_only(path, "reduced checkpoint", "regenerate it")


def ship(
    recipe: ShippedRecipe,
    run_dir: Path,
    command: str,
    commit: str,
    out: Path,
) -> Manifest:
    """Reduce ``run_dir``'s best checkpoint to ``out/NAME.pt``, score it, write the manifest."""
    summary = _read_json(run_dir / "summary.json")
    if summary.get("stopped") != "finished":
        raise TrmError(
            f"{run_dir}/summary.json says the run stopped as {summary.get('stopped')!r}, not "
            "'finished'; ship a finished run"
        )
    pm = load_plugins("")
    source_path = chosen_checkpoint(run_dir)
    payload = pm.hook.load_checkpoint(path=source_path, map_location="cpu")
    reduced = reduce_checkpoint(payload)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{recipe.name}.pt"
    loaded = write_reduced(reduced, target)
    kinds = score_kinds(pm, recipe, loaded)
    manifest = Manifest(
        name=recipe.name,
        description=recipe.description,
        trained_on=recipe.trained_on,
        puzzle=recipe.puzzle,
        command=command,
        seed=checkpoint_spec(payload).train.seed,
        commit=commit,
        trm_version=trm.__version__,
        machine=machine_of(run_dir, summary),
        steps=int(summary["steps"]),
        checkpoint_step=int(payload["step"]),
        wall_s=float(summary["wall_s"]),
        kinds=kinds,
        sha256=file_sha256(target),
        size_bytes=target.stat().st_size,
    )
    (out / f"{recipe.name}.json").write_text(
        json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8"
    )
    return manifest


def score_kinds(pm: Any, recipe: ShippedRecipe, loaded: dict[str, Any]) -> list[KindAccuracy]:
    """The reduced checkpoint ``loaded`` scored on each kind of ``recipe`` (step 3 above)."""
    spec, model = restore_model(loaded, torch.device("cpu"))
    placement = _cpu_placement(pm, spec)
    kinds = []
    for kind in recipe.kinds:
        options = kind_options(pm, spec, kind.overrides, f"kind {kind.name!r}")
        seed = spec.train.seed if kind.seed is None else kind.seed
        print(f"shipped_weights: {recipe.name}: scoring kind {kind.name!r}", file=sys.stderr)
        score = score_kind(
            pm,
            loaded,
            spec,
            model,
            placement,
            options,
            seed,
            kind.count,
            EVAL_BATCH,
            lambda _message: None,
            f"kind {kind.name!r}",
        )
        kinds.append(
            KindAccuracy(
                kind=kind.name,
                source=spec.data.source,
                options=options,
                seed=seed,
                count=score.examples,
                exact_accuracy=score.exact_accuracy,
                cell_accuracy=score.cell_accuracy,
            )
        )
    return kinds


def rescore(recipe: ShippedRecipe, out: Path) -> Manifest:
    """Score the shipped ``out/NAME.pt`` on the recipe's kinds and write ``out/NAME.json``
    again with them; the rest of its manifest is kept. TrmError when the file is not the one
    the manifest records."""
    path = out / f"{recipe.name}.json"
    old = read_manifest(path)
    checkpoint = out / f"{recipe.name}.pt"
    check_file(checkpoint, old, f"shipped model {recipe.name}")
    loaded = torch.load(checkpoint, map_location="cpu", weights_only=True)
    manifest = attrs.evolve(old, kinds=score_kinds(load_plugins(""), recipe, loaded))
    path.write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")
    return manifest


def _cpu_placement(pm: Any, spec: Any) -> Any:
    """The placement ``trm eval`` would use here for ``spec`` (the machine's device)."""
    from trm.cli.output import info
    from trm.plan.pipeline import detect_hardware, runtime_here

    return runtime_here(pm, spec, detect_hardware(pm), info).placement()


def print_table(manifests: list[Manifest]) -> None:
    rows = [
        [
            m.name,
            str(m.checkpoint_step),
            f"{m.size_bytes / 1e6:.2f} MB",
            k.kind,
            str(k.count),
            f"{k.exact_accuracy:.2%}",
            f"{k.cell_accuracy:.2%}",
        ]
        for m in manifests
        for k in m.kinds
    ]
    print_rows(["model", "step", "file", "kind", "examples", "exact", "cell"], rows)
    for m in manifests:
        print(
            f"{m.name}: {m.steps} steps, {m.wall_s:.0f} s on {m.machine.cpu_model} "
            f"({m.machine.physical_cores} cores, {m.machine.device}); `{m.command}`"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(RECIPES), help="regenerate this model only")
    parser.add_argument(
        "--out", type=Path, help="where NAME.pt and NAME.json go (default: the package's weights/)"
    )
    parser.add_argument(
        "--work", type=Path, default=Path("runs/shipped"), help="run directories' parent"
    )
    parser.add_argument(
        "--from-run", type=Path, help="ship this finished run (needs --only, --command)"
    )
    parser.add_argument("--command", help="with --from-run: the exact command that made the run")
    parser.add_argument("--commit", help="the trm commit the run trained at (default: HEAD here)")
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="score the shipped NAME.pt in --out again on the recipe's kinds (needs --only)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    try:
        if args.from_run is not None and (args.only is None or not args.command):
            raise TrmError(
                "--from-run needs --only NAME (which recipe's kinds and words) and --command "
                "'…' (the exact command that made the run: a run directory does not record it)"
            )
        if args.rescore and (args.only is None or args.from_run is not None):
            raise TrmError(
                "--rescore needs --only NAME (the shipped model to score again) and takes no "
                "--from-run (it trains nothing)"
            )
        out = args.out if args.out is not None else shipped_dir()
        commit = args.commit or current_commit()
        manifests = []
        for name in [args.only] if args.only else sorted(RECIPES):
            recipe = RECIPES[name]
            if args.rescore:
                manifests.append(rescore(recipe, out))
                continue
            if args.from_run is not None:
                run_dir, command = args.from_run, args.command
            else:
                run_dir = args.work / name
                command = train(recipe, run_dir)
            manifests.append(ship(recipe, run_dir, command, commit, out))
    except TrmError as exc:
        print(f"shipped_weights: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"models": [m.to_json() for m in manifests]}, indent=2))
    else:
        print_table(manifests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
