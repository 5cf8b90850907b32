"""A multi-task mix's data before the loop: each ``[[data.mix]]`` dataset found or built,
the leak check, and the one mixed dataset the run reads.

Each table names a dataset as ``[data]`` does: a built folder (``dir``) or a source's
generated task (``[data.mix.generate]``, built with the run's seed into
``RUN_DIR/data-mix/NAME``, reused while its recipe holds). The mixed dataset is
``RUN_DIR/data`` in the ordinary puzzle-dataset format, one set per task (the set is named
after the task), in the shared layout of :mod:`trm.data.mix_layout`, with ``mix.json``
recording that layout; it is rebuilt only when its record changes.

**The leak check.** A dataset's held-out test tasks must not be another dataset's training
tasks: ARC-AGI-2's training set holds ARC-AGI-1's evaluation tasks, so a mix of the two
would score ARC-AGI-1 on tasks the model trained on (the reference's README warns of it).
The check reads the task identifiers: a puzzle's name up to the reference's augmentation
separator ``|||`` (the blank identifier has none). A task that is in dataset A's test split
and in dataset B's train split but not B's test split (B trains on its test pairs) is a leak,
and the run is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from trm.data.mix_layout import PAD, MixLayout, plan_layout, read_layout, write_layout
from trm.data.puzzle_dataset import (
    PuzzleDatasetMetadata,
    SetSize,
    SplitWriter,
    open_split,
    read_identifiers,
    write_identifiers,
)
from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.plan.build import BUILD_RECORD
from trm.plugin_manager import TrmPluginManager
from trm.spec import DataSpec, MixEntry, RunSpec

Log = Callable[[str], None]
PARTS = "data-mix"
AUGMENTATION_SEPARATOR = "|||"
# The keys of a [[data.mix]] table that a single dataset's [data] has too.
ENTRY_KEYS = ("source", "dir", "generate")


def entry_spec(spec: RunSpec, entry: MixEntry) -> RunSpec:
    """The single-dataset spec of one mix table: its dataset in ``[data]``, the rest as
    ``spec``'s (the seed above all: a generated task is built with the run's seed)."""
    data = DataSpec(
        source=entry.source,
        dir=entry.dir,
        generate=dict(entry.generate),
        train_split=spec.data.train_split,
        eval_split=spec.data.eval_split,
        reader=spec.data.reader,
        prefetch_steps=spec.data.prefetch_steps,
    )
    return attrs.evolve(spec, data=data)


def part_run_dir(run_dir: Path, entry: MixEntry) -> Path:
    """Where a generated task of the mix is built (``PART/data``)."""
    return run_dir / PARTS / entry.task


CheckData = Callable[[TrmPluginManager, RunSpec], None]


def check_entries(pm: TrmPluginManager, spec: RunSpec, check_data: CheckData) -> None:
    """Check every table's dataset with ``check_data`` (trm.plan.dataset's: the source, a
    ``dir`` holding that source's puzzles, the ``[generate]`` options) before any is built,
    so that a bad last table costs no build of the first. TrmError naming the table's keys
    (``data.mix[1].generate.size …``, not ``data.generate.size``)."""
    for n, entry in enumerate(spec.data.mix):
        try:
            check_data(pm, entry_spec(spec, entry))
        except TrmError as error:
            message = error.message
            for key in ENTRY_KEYS:
                message = message.replace(f"data.{key}", f"data.mix[{n}].{key}")
            if not message.startswith(f"data.mix[{n}]"):
                message = f"data.mix[{n}] ({entry.task}): {message}"
            raise TrmError(message) from None


@contextlib.contextmanager
def _parts_removed_on_refusal(run_dir: Path) -> Iterator[None]:
    """On a TrmError inside, remove ``run_dir/data-mix`` when it was not there before, so
    that a refused mix leaves nothing behind."""
    parts_before = (run_dir / PARTS).exists()
    try:
        yield
    except TrmError:
        if not parts_before:
            shutil.rmtree(run_dir / PARTS, ignore_errors=True)
        raise


def mix_shape(
    pm: TrmPluginManager,
    spec: RunSpec,
    run_dir: Path,
    log: Log | None,
    build: bool,
    task_shape: Callable[..., DatasetShape],
    check_data: CheckData,
) -> DatasetShape:
    """The mixed train split's shape, from each task's (``task_shape``:
    trm.plan.dataset.dataset_shape, which calls this for a mix), after every table is checked
    (:func:`check_entries`). With ``build`` a task may be built into ``run_dir/data-mix``;
    a refusal removes that folder again when this run made it."""
    check_entries(pm, spec, check_data)
    with _parts_removed_on_refusal(run_dir):
        shapes = [
            task_shape(pm, entry_spec(spec, e), part_run_dir(run_dir, e), log, build)
            for e in spec.data.mix
        ]
    seq_len = max(s.seq_len for s in shapes)
    return DatasetShape(
        seq_len=seq_len,
        vocab_size=1 + sum(s.vocab_size - 1 for s in shapes),
        num_puzzle_identifiers=sum(s.num_puzzle_identifiers for s in shapes),
        total_puzzles=sum(s.total_puzzles for s in shapes),
        total_groups=sum(s.total_groups for s in shapes),
        train_file_bytes=sum(s.train_file_bytes * seq_len // max(s.seq_len, 1) for s in shapes),
        epoch_rows=sum(s.rows_per_epoch for s in shapes),
    )


def ensure_mix(
    pm: TrmPluginManager,
    spec: RunSpec,
    run_dir: Path,
    log: Log,
    ensure_dataset: Callable[[TrmPluginManager, RunSpec, Path, Log], Path],
    check_data: CheckData,
) -> Path:
    """The mixed dataset the run reads (``run_dir/data``), built when missing or stale; each
    task's dataset checked (:func:`check_entries`), then found or built by
    ``ensure_dataset`` (trm.plan.dataset's, which calls this for a mix).

    TrmError (``data.mix: …``) for a bad table or a leak between the datasets; a task this
    call built for the refused mix is removed again, so the refusal leaves nothing behind."""
    check_entries(pm, spec, check_data)
    folders = []
    with _parts_removed_on_refusal(run_dir):
        for entry in spec.data.mix:
            folders.append(
                ensure_dataset(pm, entry_spec(spec, entry), part_run_dir(run_dir, entry), log)
            )
        check_no_leak([e.task for e in spec.data.mix], folders, spec.data)
    out = run_dir / "data"
    record = {
        "mix": [
            {"name": e.task, "source": e.source, "weight": e.weight, "data_dir": str(folder)}
            for e, folder in zip(spec.data.mix, folders, strict=True)
        ],
        "built": [_build_stamp(folder) for folder in folders],
        "splits": [spec.data.train_split, spec.data.eval_split],
    }
    if _record(out) == record:
        return out.resolve()
    log(f"mixing {', '.join(e.task for e in spec.data.mix)} into {out} …")
    staging = run_dir / ".data.mixing"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        layout = build_mix(spec.data, [e.task for e in spec.data.mix], folders, staging)
        (staging / BUILD_RECORD).write_text(json.dumps(record, indent=2), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(
        "mix layout: "
        + "; ".join(
            f"{t.name} tokens {t.token_offset}..{t.token_offset + t.vocab_size - 2}, "
            f"identifiers from {t.identifier_offset}, rows of {t.seq_len}"
            for t in layout.tasks
        )
        + f" (rows of {layout.seq_len}, vocabulary {layout.vocab_size})"
    )
    return out.resolve()


def _record(folder: Path) -> Any:
    try:
        return json.loads((folder / BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _build_stamp(folder: Path) -> Any:
    """What identifies a task's dataset as built: its build record, else its train split's
    dataset.json (a folder given by ``dir``)."""
    record = _record(folder)
    if record is not None:
        return record
    try:
        return (folder / "train" / "dataset.json").stat().st_mtime_ns
    except OSError:
        return None


def task_keys(data_dir: Path, split: str) -> set[str]:
    """The task identities of ``data_dir/split``: each puzzle's identifier name up to the
    augmentation separator; the blank identifier and unnamed datasets give none."""
    path = data_dir / split
    if not (path / "dataset.json").is_file() or not (data_dir / "identifiers.json").is_file():
        return set()
    names = read_identifiers(data_dir)
    opened = open_split(path)
    blank = opened.metadata.blank_identifier_id
    used: set[int] = set()
    for s in opened.sets.values():
        used.update(int(i) for i in np.unique(np.asarray(s.puzzle_identifiers)))
    used.discard(blank)
    return {names[i].split(AUGMENTATION_SEPARATOR, 1)[0] for i in used if i < len(names)}


def check_no_leak(names: list[str], folders: list[Path], data: DataSpec) -> None:
    """TrmError (``data.mix: …``) when a dataset trains on another's held-out test tasks (see
    the module docstring)."""
    train = [task_keys(f, data.train_split) for f in folders]
    test = [task_keys(f, data.eval_split) for f in folders]
    for a, held_out in enumerate(test):
        for b in range(len(folders)):
            if a == b:
                continue
            leaked = sorted(held_out & (train[b] - test[b]))
            if leaked:
                shown = ", ".join(leaked[:3]) + (", …" if len(leaked) > 3 else "")
                raise TrmError(
                    f"data.mix: {names[b]} trains on {len(leaked)} of {names[a]}'s held-out "
                    f"test tasks ({shown}), so {names[a]}'s evaluation would score puzzles the "
                    "model learned (as ARC-AGI-2's training set holds ARC-AGI-1's evaluation "
                    f"tasks); mix datasets whose test tasks the others do not train on"
                )


def build_mix(data: DataSpec, names: list[str], folders: list[Path], out: Path) -> MixLayout:
    """Write the mixed dataset of the tasks ``names`` (datasets in ``folders``) into ``out``:
    both splits, ``identifiers.json`` and ``mix.json``; returns the layout."""
    splits = [data.train_split, data.eval_split]
    metas = [open_split(folder / data.train_split).metadata for folder in folders]
    entries = [
        {
            "name": name,
            "source": entry.source,
            "weight": float(entry.weight),
            "seq_len": m.seq_len,
            "vocab_size": m.vocab_size,
            "pad_id": m.pad_id,
            "ignore_label_id": m.ignore_label_id,
            "num_puzzle_identifiers": m.num_puzzle_identifiers,
            "data_dir": str(folder),
        }
        for name, entry, folder, m in zip(names, data.mix, folders, metas, strict=True)
    ]
    layout = plan_layout(entries)
    out.mkdir(parents=True)
    for split in splits:
        if all((folder / split / "dataset.json").is_file() for folder in folders):
            _write_split(layout, folders, out / split, split)
    identifiers = []
    for task, folder in zip(layout.tasks, folders, strict=True):
        try:
            own = read_identifiers(folder)
        except TrmError:
            own = []
        own = own + [f"<{i}>" for i in range(len(own), task.num_puzzle_identifiers)]
        identifiers.extend(f"{task.name}/{name}" for name in own[: task.num_puzzle_identifiers])
    write_identifiers(out, identifiers)
    write_layout(out, layout)
    return layout


def _write_split(layout: MixLayout, folders: list[Path], out: Path, split: str) -> None:
    """One split of the mix: task ``k``'s sets of its own split, joined into the set named
    after it, its rows in the shared layout."""
    opened = [open_split(folder / split) for folder in folders]
    sizes = {
        task.name: SetSize(o.num_examples, o.metadata.total_puzzles, o.num_groups)
        for task, o in zip(layout.tasks, opened, strict=True)
    }
    puzzles = sum(size.puzzles for size in sizes.values())
    examples = sum(size.examples for size in sizes.values())
    metadata = PuzzleDatasetMetadata(
        seq_len=layout.seq_len,
        vocab_size=layout.vocab_size,
        pad_id=PAD,
        ignore_label_id=PAD,
        blank_identifier_id=opened[0].metadata.blank_identifier_id,
        num_puzzle_identifiers=layout.num_puzzle_identifiers,
        total_groups=sum(size.groups for size in sizes.values()),
        mean_puzzle_examples=examples / max(puzzles, 1),
        total_puzzles=puzzles,
        sets=layout.names,
    )
    dtype = np.uint8 if layout.vocab_size <= 256 else np.int32
    with SplitWriter(out, metadata, sizes, token_dtype=dtype) as writer:
        for task, o in zip(layout.tasks, opened, strict=True):
            for s in o.sets.values():
                table = task.token_table()
                inputs = np.full((s.num_examples, layout.seq_len), PAD, dtype=dtype)
                labels = np.full((s.num_examples, layout.seq_len), PAD, dtype=dtype)
                inputs[:, : task.seq_len] = table[np.asarray(s.inputs, dtype=np.int64)]
                raw = np.asarray(s.labels, dtype=np.int64)
                if task.ignore_label_id is not None:
                    raw = np.where(raw == task.ignore_label_id, task.pad_id, raw)
                labels[:, : task.seq_len] = table[raw]
                writer.append(
                    task.name,
                    {
                        "inputs": inputs,
                        "labels": labels,
                        "puzzle_identifiers": np.asarray(s.puzzle_identifiers, dtype=np.int64)
                        + task.identifier_offset,
                        "puzzle_indices": np.asarray(s.puzzle_indices),
                        "group_indices": np.asarray(s.group_indices),
                    },
                )


def mix_layout_of(data_dir: Path) -> MixLayout | None:
    """The mix layout of a run's dataset folder (None: a single dataset)."""
    return read_layout(data_dir)
