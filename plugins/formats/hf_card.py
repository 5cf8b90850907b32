"""The model card (``README.md``) of a model folder that ``trm export --format hf`` writes.

The Hub reads its YAML front matter (``library_name``, ``tags``, ``license`` and ``datasets``
when known), which ``huggingface_hub``'s :class:`ModelCard` writes from a
:class:`ModelCardData` (never YAML assembled here); the body says what the model solves,
the command and spec that trained it, the machine, the steps, the held-out exact accuracy
the run measured at the exported step, and how to load the folder with trm. What a run
directory does not record (a checkpoint file outside one, a run without evaluations) is
said to be unknown, never guessed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attrs import frozen

from trm.data.shape import DatasetShape
from trm.plugins.formats.hf_folder import CONFIG_FILE, WEIGHTS_FILE
from trm.spec import RunSpec, spec_to_toml

# The folder name of a run's checkpoints (a checkpoint file's run is the folder above it).
_CHECKPOINTS = "checkpoints"


@frozen
class HeldOut:
    """One evaluation the run logged: its step, the split, the examples scored and the
    exact accuracy (a fraction in [0, 1])."""

    step: int
    split: str
    examples: int | None
    exact_accuracy: float


@frozen
class RunRecord:
    """What the run directory records about the run: the machine (CPU model and cores from
    ``hardware.json``, device from ``summary.json``), the steps it made, its training wall
    time in seconds, and the evaluation at (or last before) the exported step. None where
    the run directory is not known or does not say."""

    run_dir: Path | None
    cpu_model: str | None
    cores: int | None
    device: str | None
    steps: int | None
    wall_s: float | None
    held_out: HeldOut | None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _run_dir(run: Path) -> Path | None:
    if run.is_dir():
        return run.parent if run.name == _CHECKPOINTS else run
    if run.parent.name == _CHECKPOINTS:
        return run.parent.parent
    return None


def _held_out(run_dir: Path, step: int, split: str) -> HeldOut | None:
    """The eval row of ``metrics.jsonl`` at ``step``, else the last one before it."""
    best: dict[str, Any] | None = None
    try:
        lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or row.get("kind") != "eval":
            continue
        at, accuracy = row.get("step"), row.get("exact_accuracy")
        usable = isinstance(at, int) and at <= step and isinstance(accuracy, (int, float))
        if usable and (best is None or at >= best["step"]):
            best = row
    if best is None:
        return None
    examples = best.get("examples")
    return HeldOut(
        step=best["step"],
        split=split,
        examples=examples if isinstance(examples, int) else None,
        exact_accuracy=float(best["exact_accuracy"]),
    )


def read_run_record(run: Path, step: int, split: str) -> RunRecord:
    """The :class:`RunRecord` of the run ``run`` names (a run directory, its checkpoints
    folder, or a checkpoint file in one) for the weights of ``step``, whose evaluations
    scored the split ``split``."""
    run_dir = _run_dir(run)
    if run_dir is None:
        return RunRecord(None, None, None, None, None, None, None)
    summary = _read_json(run_dir / "summary.json")
    summary = summary if isinstance(summary, dict) else {}
    hardware = _read_json(run_dir / "hardware.json")
    hardware = hardware if isinstance(hardware, dict) else {}

    def typed(data: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
        value = data.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    return RunRecord(
        run_dir=run_dir,
        cpu_model=typed(hardware, "cpu_model", str),
        cores=typed(hardware, "physical_cores", int),
        device=typed(summary, "device", str),
        steps=typed(summary, "steps", int),
        wall_s=typed(summary, "wall_s", (int, float)),
        held_out=_held_out(run_dir, step, split),
    )


def card_data(spec: RunSpec, license_id: str | None, datasets: tuple[str, ...]) -> Any:
    """The card's metadata as the Hub's own :class:`huggingface_hub.ModelCardData`, which
    writes the YAML front matter, so that any text — a dataset name with an emoji, a colon —
    reads back as given."""
    from huggingface_hub import ModelCardData

    return ModelCardData(
        library_name="trm",
        tags=["trm", "tiny-recursive-model", "puzzle-solving", spec.data.source],
        license=license_id or None,
        datasets=list(datasets) or None,
    )


def held_out_line(record: RunRecord) -> str:
    """The card's sentence about held-out exact accuracy."""
    held = record.held_out
    if held is None:
        return "Held-out exact accuracy: not measured (the run logged no evaluation)."
    examples = f"{held.examples} " if held.examples is not None else ""
    return (
        f"Held-out exact accuracy: {held.exact_accuracy * 100:.2f}% on {examples}examples of "
        f"the {held.split!r} split, measured by the run at step {held.step}."
    )


def model_card(
    spec: RunSpec,
    shape: DatasetShape,
    record: RunRecord,
    step: int,
    ema: bool,
    license_id: str | None,
    datasets: tuple[str, ...],
) -> str:
    """The text of README.md for the model ``spec`` describes, exported at ``step``."""
    machine = "not recorded"
    if record.cpu_model is not None:
        cores = f", {record.cores} cores" if record.cores is not None else ""
        device = f", trained on {record.device}" if record.device is not None else ""
        machine = f"{record.cpu_model}{cores}{device}"
    steps = f"{step}" + (f" of the run's {record.steps}" if record.steps is not None else "")
    wall = f" in {record.wall_s:.1f} s" if record.wall_s is not None else ""
    weights = "the EMA copy of the weights" if ema else "the trained weights"
    body = [
        "",
        f"# {spec.name}",
        "",
        f"A Tiny Recursive Model trained with trm on the "
        f"`{spec.data.source}` task: puzzles of {shape.seq_len} tokens, a vocabulary of "
        f"{shape.vocab_size}, hidden size {spec.arch.hidden_size}, H_cycles "
        f"{spec.arch.H_cycles}, L_cycles {spec.arch.L_cycles}.",
        "",
        "## Training",
        "",
        "Command: `trm run spec.toml`, with this spec (the run's own `spec.toml`, every "
        "override applied):",
        "",
        "```toml",
        spec_to_toml(spec).rstrip(),
        "```",
        "",
        f"- Machine: {machine}",
        f"- Steps: {steps}{wall}; these are {weights} at step {step}",
        f"- {held_out_line(record)}",
        "",
        "## Use with trm",
        "",
        "```bash",
        "trm solve DIR PUZZLE          # DIR: this folder, downloaded",
        "trm eval DIR --data DATASET   # a dataset built by `trm data build`",
        "trm run spec.toml --init-from DIR",
        "```",
        "",
        "```python",
        "import trm",
        'model = trm.load("DIR")',
        "print(model.solve(PUZZLE).answer)",
        "```",
        "",
        f"`{CONFIG_FILE}` holds the architecture, the data layout and the task; "
        f"`{WEIGHTS_FILE}` the weights. trm reads them with `json` and `safetensors` only.",
        "",
    ]
    from huggingface_hub import ModelCard

    # an empty metadata block above the body, which the card's data then fills: the library
    # writes the YAML
    card = ModelCard("---\n\n---\n" + "\n".join(body))
    card.data = card_data(spec, license_id, datasets)
    return str(card)
