"""``trm import``: a reference checkpoint becomes a trm run directory.

The run directory holds what ``trm run`` writes before training — ``spec.toml`` and one
checkpoint (written through the ``save_checkpoint`` hook, so the checkpoint plugin's layout
and SHA-256 record apply) — plus ``import.json`` (where the weights came from, what the
config mapping left out) and one ``imported`` event row in ``metrics.jsonl``. ``trm eval``,
``trm solve`` and ``trm report`` read it as any run; ``trm run RUN/spec.toml --out RUN``
continues it from the checkpoint's step with fresh optimizers (the reference saves none).

Nothing is written unless everything checks out: the directory is assembled in a sibling
staging folder and renamed into place at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from attrs import define, field, frozen

from trm.checkpoint_file import file_sha256
from trm.data.puzzle_dataset import open_split, read_identifiers
from trm.data.shape import DatasetShape, read_shape
from trm.errors import TrmError
from trm.model import EMA, build_model
from trm.plan.dataset import data_sources
from trm.plugin_manager import TrmPluginManager
from trm.plugins.formats.reference_config import (
    CONFIG_FILE,
    MappedConfig,
    read_config,
    spec_from_reference,
)
from trm.plugins.formats.reference_weights import (
    PUZZLE_TABLE,
    as_state_dict,
    load_torch_file,
    strip_compiled_prefix,
    to_trm_weights,
)
from trm.spec import RunSpec, spec_to_toml
from trm.state import TrainState

Log = Callable[[str], None]
STEP_FILE = re.compile(r"^step_(\d+)$")
IMPORT_RECORD = "import.json"
# data sources trm can guess from a dataset's shape: (seq_len, vocab_size) -> source
_SHAPES = {(900, 12): "arc", (900, 6): "maze"}
# labelled examples a --source other than the guessed one must judge (one valid is enough)
EXAMPLES_CHECKED = 4


@frozen
class ImportResult:
    """What ``trm import`` made: the run directory, its spec, the step and the notes shown."""

    run_dir: Path
    spec: RunSpec
    step: int
    notes: tuple[str, ...]


@define
class ImportedState(TrainState):
    """A TrainState whose checkpoint says it was imported: no optimizer state, no carry and
    no RNG states (the reference saves none), and where the weights came from."""

    imported: dict[str, Any] = field(factory=dict)

    def state_dict(self) -> dict[str, Any]:
        payload = super().state_dict()
        payload.update(optimizers=None, carry=None, rng=None, imported=dict(self.imported))
        return payload


def find_checkpoint(path: Path) -> Path:
    """The checkpoint file ``path`` names: the file itself, or the newest ``step_N`` of a
    folder; TrmError when there is none."""
    if path.is_file():
        return path
    if not path.exists():
        raise TrmError(f"checkpoint {path} does not exist; give a step_N file or its folder")
    steps = sorted((int(m.group(1)), p) for p in path.iterdir() if (m := STEP_FILE.match(p.name)))
    if not steps:
        raise TrmError(
            f"{path} holds no step_N checkpoint file of the reference; give the file itself"
        )
    return steps[-1][1]


def step_of(path: Path) -> int:
    """The step a reference checkpoint's name records (``step_N``), 0 for another name."""
    match = STEP_FILE.match(path.name)
    return int(match.group(1)) if match else 0


def check_output(out: Path) -> None:
    """TrmError unless ``out`` can be made: absent, or an empty folder, in an existing one."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TrmError(f"--out {out} already exists and is not empty; choose a new folder")
    if not out.parent.is_dir():
        raise TrmError(f"--out {out}: folder {out.parent} does not exist")


def write_folder(out: Path, kind: str, write: Callable[[Path], None]) -> None:
    """Make ``out`` whole or not at all: ``write`` fills a staging folder beside it (see
    :func:`make_staging`), which then replaces ``out`` (an empty folder there, checked
    before). A write that fails leaves no staging folder; an OSError is the one line of
    :func:`unwritable`."""
    staging = make_staging(out, kind)
    try:
        write(staging)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise unwritable(out, exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def make_staging(out: Path, kind: str) -> Path:
    """A new empty folder beside ``out`` to assemble it in (``kind``: importing, exporting);
    TrmError when that folder cannot be written (a read-only mount, no room)."""
    staging = out.parent / f".{out.name}.{kind}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
    except OSError as exc:
        raise unwritable(out, exc) from None
    return staging


def unwritable(out: Path, exc: OSError) -> TrmError:
    """The one line for an ``--out`` that cannot be written."""
    return TrmError(f"--out {out} cannot be written ({exc.strerror or exc}); choose another --out")


def _resolve_data(given: Path | None, mapped: MappedConfig, config_path: Path) -> Path:
    """``--data``, else the config's data_paths[0] found from the current folder or the
    config's; TrmError saying which places were tried."""
    if given is not None:
        if not (given / "train" / "dataset.json").is_file():
            raise TrmError(
                f"--data {given} is not a dataset folder (no train/dataset.json); give the "
                "folder the weights were trained on"
            )
        return given.resolve()
    if not mapped.data_paths:
        raise TrmError(f"config {config_path} names no data_paths; give the dataset with --data")
    tried = []
    for base in (Path.cwd(), config_path.parent, *config_path.parent.parents):
        candidate = base / mapped.data_paths[0]
        tried.append(str(candidate))
        if (candidate / "train" / "dataset.json").is_file():
            return candidate.resolve()
        if len(tried) >= 4:
            break
    raise TrmError(
        f"the dataset of config {config_path}, {mapped.data_paths[0]}, is not here (tried "
        f"{', '.join(tried)}); give it with --data DIR"
    )


def check_identifiers(
    data_dir: Path, shape: DatasetShape, table_rows: int | None, config_data: Path | None
) -> str:
    """Verify that ``data_dir`` is the dataset the puzzle table was trained on; the line to
    show. TrmError when the table's rows differ from its identifiers, or when the config's
    own dataset (``config_data``, when it is here and another folder) lists other ones."""
    names = read_identifiers(data_dir) if (data_dir / "identifiers.json").is_file() else None
    count = shape.num_puzzle_identifiers
    if names is not None and len(names) != count:
        raise TrmError(
            f"{data_dir}: identifiers.json lists {len(names)} identifiers but train/dataset.json "
            f"says {count}; rebuild the dataset"
        )
    if table_rows is not None and table_rows != count:
        raise TrmError(
            f"the checkpoint's puzzle table has {table_rows} rows but {data_dir} has {count} "
            "puzzle identifiers: these weights were trained on another dataset (build the same "
            "one, or start a new run from them with trm run --init-from)"
        )
    if config_data is not None and config_data.resolve() != data_dir.resolve():
        theirs = (config_data / "identifiers.json").read_bytes()
        if names is None or theirs != (data_dir / "identifiers.json").read_bytes():
            raise TrmError(
                f"{data_dir} and the config's dataset {config_data} list different puzzle "
                "identifiers: the puzzle table would be read in the wrong order; give the "
                "dataset the weights were trained on"
            )
        return f"identifiers of {data_dir} equal those of {config_data}"
    if table_rows is None:
        return "no puzzle table (puzzle_emb_ndim = 0): nothing to match"
    return f"puzzle table of {table_rows} rows matches the {count} identifiers of {data_dir}"


def _config_dataset(mapped: MappedConfig, config_path: Path) -> Path | None:
    """The config's own dataset folder when it is reachable from here (None otherwise)."""
    if not mapped.data_paths:
        return None
    for base in (Path.cwd(), config_path.parent):
        candidate = base / mapped.data_paths[0]
        if (candidate / "identifiers.json").is_file():
            return candidate
    return None


def guess_source(data_dir: Path, shape: DatasetShape, mapped: MappedConfig) -> str | None:
    """The data source of a dataset: its build record, the config's evaluator, or its shape
    (None when none says)."""
    try:
        record = json.loads((data_dir / "build.json").read_text(encoding="utf-8"))
        if isinstance(record, dict) and isinstance(record.get("source"), str):
            return record["source"]
    except (OSError, ValueError):
        pass
    if mapped.spec.data.source == "arc":
        return "arc"
    if (shape.seq_len, shape.vocab_size) in _SHAPES:
        return _SHAPES[(shape.seq_len, shape.vocab_size)]
    side = round(shape.seq_len**0.5)
    if side * side == shape.seq_len and shape.vocab_size == side + 2:  # blank, pad, digits
        return "sudoku"
    return None


def _recorded_source(data_dir: Path) -> str | None:
    """The source the dataset's build record (``build.json``, in data a run built) names."""
    try:
        record = json.loads((data_dir / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    source = record.get("source") if isinstance(record, dict) else None
    return source if isinstance(source, str) else None


def _answers_its_examples(source: Any, data_dir: Path, split: str) -> bool:
    """True when ``source`` judges one of the first few labelled examples of ``data_dir``'s
    ``split`` a valid answer (its ``check_answer``; an error counts as no)."""
    for puzzles in open_split(data_dir / split).sets.values():
        for row in range(min(EXAMPLES_CHECKED, puzzles.num_examples)):
            try:
                if source.check_answer(puzzles.inputs[row], puzzles.labels[row]):
                    return True
            except Exception:  # another task's tokens: not this source's puzzle
                continue
    return False


def choose_source(
    pm: TrmPluginManager,
    given: str | None,
    data_dir: Path,
    shape: DatasetShape,
    mapped: MappedConfig,
) -> str | None:
    """The data source of the import: ``--source`` (``given``) when it is a known source the
    dataset does not contradict, else the guess of :func:`guess_source` (None: unknown).

    TrmError for an unknown ``given``, one other than the dataset's build record names, or
    one whose ``check_answer`` judges none of the dataset's first labelled examples valid
    while the dataset looks like another source's."""
    guessed = guess_source(data_dir, shape, mapped)
    if given is None:
        return guessed
    sources = data_sources(pm)
    if given not in sources:
        known = ", ".join(sorted(sources)) or "none (is a data plugin switched off?)"
        raise TrmError(f"--source {given}: unknown data source; known: {known}")
    recorded = _recorded_source(data_dir)
    if recorded is not None and recorded != given:
        raise TrmError(
            f"--source {given} contradicts {data_dir / 'build.json'}, which records the "
            f"source {recorded!r}; leave --source out or give --source {recorded}"
        )
    split = mapped.spec.data.train_split
    if guessed not in (None, given) and not _answers_its_examples(sources[given], data_dir, split):
        raise TrmError(
            f"--source {given}: the labelled examples of {data_dir / split} are not {given} "
            f"puzzles with their answers (they look like {guessed}); leave --source out or "
            "give the dataset's own source"
        )
    return given


def import_reference(
    pm: TrmPluginManager,
    checkpoint: Path,
    out: Path,
    config: Path | None = None,
    data: Path | None = None,
    source: str | None = None,
    log: Log = print,
) -> ImportResult:
    """Turn the reference checkpoint ``checkpoint`` (a ``step_N`` file or its folder) into a
    trm run directory ``out``; see the module docstring. TrmError, with nothing written,
    for any bad input."""
    check_output(out)
    if not pm.hook.save_checkpoint.get_hookimpls():
        raise TrmError("no plugin saves checkpoints (is checkpoint switched off?)")
    path = find_checkpoint(checkpoint)
    config_path = config or path.parent / CONFIG_FILE
    if not config_path.is_file() and config is None:
        raise TrmError(
            f"no {CONFIG_FILE} beside {path}; give the config saved with these weights "
            "with --config FILE"
        )
    raw = read_config(config_path)
    mapped = spec_from_reference(raw, config_path, "", source, None, path.parent.name)
    data_dir = _resolve_data(data, mapped, config_path)
    shape = read_shape(data_dir, mapped.spec.data.train_split)
    chosen = choose_source(pm, source, data_dir, shape, mapped)
    if chosen is None:
        raise TrmError(
            f"cannot tell which task {data_dir} holds; name its data source with --source "
            "(sudoku, maze or arc)"
        )
    mapped = spec_from_reference(raw, config_path, str(data_dir), chosen, shape, path.parent.name)
    spec = mapped.spec
    state_dict = as_state_dict(load_torch_file(path, "checkpoint"), path)
    state_dict, compiled = strip_compiled_prefix(state_dict, path)
    table = state_dict.get("model.inner." + PUZZLE_TABLE)
    rows = int(table.shape[0]) if table is not None and table.ndim == 2 else None
    identifiers = check_identifiers(data_dir, shape, rows, _config_dataset(mapped, config_path))
    torch.manual_seed(spec.train.seed)
    model = build_model(spec.arch, shape)
    weights = to_trm_weights(state_dict, model.state_dict(), path)
    model.load_state_dict(weights)
    step = step_of(path)
    notes = [
        f"weights of {path} ({'compiled run, keys with _orig_mod.' if compiled else 'plain keys'}"
        f"{', the EMA copy' if spec.train.ema else ''}) at step {step}",
        identifiers,
        *(f"left out {key}: {why}" for key, why in mapped.ignored),
    ]
    record = {
        "checkpoint": str(path.resolve()),
        "checkpoint_sha256": file_sha256(path),
        "config": str(config_path.resolve()),
        "compiled_keys": compiled,
        "step": step,
        "left_out": {key: why for key, why in mapped.ignored},
    }
    write_folder(
        out,
        "importing",
        lambda staging: _write_run(pm, staging, spec, model, shape, data_dir, step, record),
    )
    return ImportResult(out, spec, step, tuple(notes))


def _write_run(
    pm: TrmPluginManager,
    run_dir: Path,
    spec: RunSpec,
    model: torch.nn.Module,
    shape: DatasetShape,
    data_dir: Path,
    step: int,
    record: dict[str, Any],
) -> None:
    """spec.toml, the checkpoint (EMA shadows = the imported weights when the spec has EMA),
    import.json and the ``imported`` event row."""
    (run_dir / "spec.toml").write_text(spec_to_toml(spec), encoding="utf-8")
    state = ImportedState(
        spec=spec,
        model=model,
        optimizers=[],
        ema=EMA(model, spec.train.ema_rate) if spec.train.ema else None,
        carry=None,
        run_dir=run_dir,
        total_steps=spec.train.total_steps(shape.rows_per_epoch),
        step=step,
        samples=step * spec.train.global_batch_size,
        micro_batch_size=0,  # the resumed run keeps the micro-batch it planned
        data_dir=str(data_dir),
        dataset_shape=shape,
        imported=record,
    )
    saved = pm.hook.save_checkpoint(state=state, run_dir=run_dir, reason="import")
    if saved is None:
        raise TrmError("no plugin saved the imported checkpoint (is checkpoint switched off?)")
    (run_dir / IMPORT_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    row = {"kind": "event", "event": "imported", "step": step, "from": record["checkpoint"]}
    (run_dir / "metrics.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
