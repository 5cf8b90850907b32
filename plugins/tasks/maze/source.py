"""The ``maze`` data source: build options, the dataset builder, puzzle I/O and path metrics.

``build`` writes ``out_dir/train`` and ``out_dir/test`` with one set ``all`` as the reference
builder does: one example per maze, puzzle identifier 0 for all (``identifiers.json`` is
``["<blank>"]``), and each train maze alone in its group, or with ``augment 8`` together with
its 7 other dihedral versions (rotations and mirrors; the maze itself first). The test set is
never augmented.

Generated mazes (:mod:`.generator`) are distinct up to rotation and mirroring, and no test maze
is a train maze or a rotation or mirror of one. The label of a generated maze, augmented
copies included, is always the tie-break's shortest path (:mod:`.grid`): a function of the
question. Mazes imported with ``csv`` keep the reference's labels (an augmented copy gets its
label rotated or mirrored with it), and test rows that also occur among the train split's rows
are dropped.

Presets (``preset``; a field given explicitly overrides the preset's value):

- ``hard``: the reference's maze-30x30-hard (HRM, after Lehnert et al.): 30x30, 270-450 random
  walls, shortest path at least 111 steps (longer than 110). About 0.02-0.04 s per maze on one
  core.
- ``easy``: 10x10, 20-30 walls, shortest path at least 8 steps (mean about 11, most 8-14, a
  few up to about 28): seq_len 100 instead of 900 (attention and MLP-over-tokens cost fall
  with it) and paths a tenth as long, so far fewer recursion steps must carry the search; the
  same kind of maze, small enough for CPU runs (a few ms to generate 1000).
- ``""`` (custom): ``size``, ``min_walls``, ``max_walls`` and ``min_path`` must all be given
  (with ``csv`` only ``size``).

``seq_len`` is ``size * size``: smaller mazes are not padded to 30x30.

Only the base mazes are held in memory; the train split is augmented and written a chunk of
whole groups at a time (:data:`_CHUNK_ROWS` rows) through :class:`SplitWriter`.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from attrs import field, frozen

from trm.data.generation import quarter_progress, random_subset, resolve_workers, stream_seed
from trm.data.puzzle_dataset import (
    PuzzleDatasetMetadata,
    SetSize,
    SplitWriter,
    single_example_arrays,
    write_identifiers,
)
from trm.data.shape import DatasetShape
from trm.data.symmetry import CellSymmetry
from trm.errors import TrmError
from trm.plugins.tasks.maze import grid
from trm.plugins.tasks.maze.csv_import import count_rows, csv_files, read_maze_csv
from trm.plugins.tasks.maze.generator import MazeParams, generate_many

SET_NAME = "all"
IDENTIFIERS = ["<blank>"]
PRESETS = {
    "hard": MazeParams(size=30, min_walls=270, max_walls=450, min_path=111),
    "easy": MazeParams(size=10, min_walls=20, max_walls=30, min_path=8),
}
# The largest maze side: seq_len 10,000, about 11 times the reference's 30x30. The model's
# attention and its MLP over tokens grow with seq_len squared, so larger mazes fit no machine
# trm plans for (and building them runs out of memory before it ends).
MAX_SIZE = 100
# The value of a shape field that means "the preset's".
FROM_PRESET = -1
AUGMENT_CHOICES = (0, 8)
# Rounds of extra generation when duplicates (or test mazes found in train) are dropped.
_MAX_ROUNDS = 20
# Independent random streams derived from the build seed.
_TRAIN_STREAM, _TEST_STREAM, _TRAIN_SUBSET, _TEST_SUBSET = range(4)
# Most train rows written at once (a chunk holds whole groups): about 29 MiB per token array of
# 30x30 mazes.
_CHUNK_ROWS = 1 << 15
# Fewest seconds between two progress lines while the train split is written.
_PROGRESS_SECONDS = 5.0


@frozen
class MazeBuildOptions:
    """Build a maze dataset: random-wall mazes labelled with a shortest S-G path, or the
    reference's maze CSV files."""

    preset: str = field(
        default="hard",
        metadata={
            "help": "'hard' (30x30, 270-450 walls, path >= 111 steps), 'easy' (10x10, 20-30 "
            "walls, path >= 8 steps) or '' (custom: give size, walls and min_path)"
        },
    )
    size: int = field(
        default=FROM_PRESET,
        metadata={"help": "maze side, 2 to 100; seq_len is size*size (-1 = the preset's)"},
    )
    min_walls: int = field(
        default=FROM_PRESET, metadata={"help": "fewest random walls (-1 = the preset's)"}
    )
    max_walls: int = field(
        default=FROM_PRESET, metadata={"help": "most random walls (-1 = the preset's)"}
    )
    min_path: int = field(
        default=FROM_PRESET,
        metadata={
            "help": "fewest steps (moves) of the shortest S-G path; hard: 111, i.e. longer "
            "than 110 (-1 = the preset's)"
        },
    )
    count: int = field(
        default=1000,
        metadata={"help": "train mazes; with --csv the train rows to take (0 = all)"},
    )
    test_count: int = field(
        default=1000,
        metadata={"help": "test mazes; with --csv the test rows to take (0 = all)"},
    )
    augment: int = field(
        default=0,
        metadata={
            "help": "0, or 8: each train maze as its 8 rotations and mirrors (one group; "
            "test is never augmented)"
        },
    )
    csv: str = field(
        default="",
        metadata={
            "help": "folder holding the reference's train.csv and test.csv (source,q,a,rating) "
            "to import instead of generating; uses size"
        },
    )
    workers: int = field(default=0, metadata={"help": "generator processes (0 = all cores)"})


_SHAPE_FIELDS = ("size", "min_walls", "max_walls", "min_path")


def resolve_params(o: MazeBuildOptions) -> MazeParams:
    """The maze parameters: the preset's, with the fields given explicitly (not -1) instead.

    An import (``csv``) uses only ``size``; the other fields are then 0 unless given.
    """
    base = PRESETS.get(o.preset)
    values = {}
    for name in _SHAPE_FIELDS:
        value = getattr(o, name)
        if value == FROM_PRESET:
            if base is not None:
                value = getattr(base, name)
            elif o.csv and name != "size":
                value = 0  # not used by an import
            else:
                raise TrmError(
                    f"data.generate.{name} must be given when data.generate.preset is '' (custom)"
                )
        values[name] = value
    return MazeParams(**values)


def validate_options(o: MazeBuildOptions) -> MazeParams:
    """Raise TrmError naming ``data.generate.<field>`` for an impossible option.

    Returns the resolved maze parameters.
    """
    if o.preset not in ("", *PRESETS):
        raise TrmError(
            f"data.generate.preset must be 'hard', 'easy' or '' (custom), got {o.preset!r}"
        )
    for name in _SHAPE_FIELDS:
        if getattr(o, name) < FROM_PRESET:
            raise TrmError(
                f"data.generate.{name} must be 0 or more (or -1 for the preset's), got "
                f"{getattr(o, name)}"
            )
    p = resolve_params(o)
    if not 2 <= p.size <= MAX_SIZE:
        raise TrmError(
            f"data.generate.size must be between 2 and {MAX_SIZE} (seq_len size*size), got {p.size}"
        )
    if not o.csv:
        cells = p.size * p.size
        if not 0 <= p.min_walls <= p.max_walls <= cells - 2:
            raise TrmError(
                f"data.generate.min_walls and max_walls must satisfy 0 <= min_walls <= "
                f"max_walls <= {cells - 2} for a {p.size}x{p.size} maze, got {p.min_walls} "
                f"and {p.max_walls}"
            )
        longest = cells - p.min_walls - 1
        if not 1 <= p.min_path <= longest:
            raise TrmError(
                f"data.generate.min_path must be between 1 and {longest} (the open cells of a "
                f"{p.size}x{p.size} maze with {p.min_walls} walls, less one), got {p.min_path}"
            )
    lowest = 0 if o.csv else 1
    for name in ("count", "test_count"):
        if getattr(o, name) < lowest:
            what = "0 (all rows) or more" if o.csv else "at least 1"
            raise TrmError(f"data.generate.{name} must be {what}, got {getattr(o, name)}")
    if o.augment not in AUGMENT_CHOICES:
        raise TrmError(
            f"data.generate.augment must be 0 or 8 (the dihedral versions), got {o.augment}"
        )
    if o.workers < 0:
        raise TrmError(f"data.generate.workers must be 0 or more, got {o.workers}")
    return p


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _canonical(row: np.ndarray, size: int) -> bytes:
    """One key per maze and its rotations and mirrors."""
    return _digest(grid.canonical_key(row, size))


def _generate_distinct(
    p: MazeParams,
    count: int,
    seed: int,
    workers: int,
    taken: set[bytes],
    log: Callable[[str], None],
    what: str,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` generated mazes whose canonical keys are not in ``taken`` nor repeated.

    Adds the kept mazes' keys to ``taken``.
    """
    kept_q: list[np.ndarray] = []
    kept_a: list[np.ndarray] = []
    start = 0
    for round_index in range(_MAX_ROUNDS):
        need = count - len(kept_q)
        if need <= 0:
            break
        batch = need if round_index == 0 else need + need // 2 + 16
        questions, labels = generate_many(
            batch,
            p,
            seed=seed,
            workers=workers,
            start=start,
            progress=quarter_progress(log, f"maze: {what}", batch),
        )
        start += batch
        for q, a in zip(questions, labels, strict=True):
            key = _canonical(q, p.size)
            if key in taken or len(kept_q) == count:
                continue
            taken.add(key)
            kept_q.append(q)
            kept_a.append(a)
        if len(kept_q) < count:
            log(f"maze: {what}: {len(kept_q)}/{count} distinct so far; generating more")
    if len(kept_q) < count:
        raise TrmError(
            f"could only generate {len(kept_q)} distinct {p.size}x{p.size} {what} (of {count}); "
            "lower data.generate.count or data.generate.test_count, or allow more walls or "
            "a larger size"
        )
    return np.stack(kept_q), np.stack(kept_a)


def _rows_taken(count: int, available: int) -> int:
    return available if count <= 0 else min(count, available)


def _augmented(
    questions: np.ndarray, labels: np.ndarray, size: int, augment: int, relabel: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each maze followed by its 7 other dihedral versions when ``augment`` is 8.

    ``relabel``: the copies' labels are the tie-break path of the copy (generated mazes);
    otherwise the label is transformed with the maze (imported mazes).
    """
    if augment == 0:
        return questions, labels
    n, cells = questions.shape
    grids_q = questions.reshape(n, size, size)
    grids_a = labels.reshape(n, size, size)
    out_q = np.empty((n, augment, cells), dtype=np.uint8)
    out_a = np.empty_like(out_q)
    for which in range(augment):
        out_q[:, which] = grid.dihedral(grids_q, which).reshape(n, cells)
        if relabel and which:
            out_a[:, which] = [grid.label_of(q) for q in out_q[:, which]]
        else:
            out_a[:, which] = grid.dihedral(grids_a, which).reshape(n, cells)
    return out_q.reshape(n * augment, cells), out_a.reshape(n * augment, cells)


def _group_size(augment: int) -> int:
    return max(1, augment)


def _train_chunks(
    questions: np.ndarray, labels: np.ndarray, size: int, augment: int, relabel: bool
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The train split's rows in order, a chunk of whole groups at a time."""
    step = max(1, _CHUNK_ROWS // _group_size(augment))
    for start in range(0, questions.shape[0], step):
        yield _augmented(
            questions[start : start + step], labels[start : start + step], size, augment, relabel
        )


def _metadata(size: int, n: int, group_size: int) -> PuzzleDatasetMetadata:
    """A split of ``n`` examples, one per puzzle, in groups of ``group_size`` puzzles."""
    return PuzzleDatasetMetadata(
        seq_len=grid.seq_len(size),
        vocab_size=grid.VOCAB_SIZE,
        pad_id=grid.PAD_TOKEN,
        ignore_label_id=grid.IGNORE_LABEL_ID,
        blank_identifier_id=0,
        num_puzzle_identifiers=len(IDENTIFIERS),
        total_groups=n // group_size,
        mean_puzzle_examples=1.0,
        total_puzzles=n,
        sets=[SET_NAME],
    )


def _write_split(
    split_dir: Path,
    questions: np.ndarray,
    labels: np.ndarray,
    size: int,
    augment: int,
    relabel: bool,
    log: Callable[[str], None],
) -> int:
    """Write one split chunk by chunk; returns the number of examples written."""
    group_size = _group_size(augment)
    rows = questions.shape[0] * group_size
    metadata = _metadata(size, rows, group_size)
    sizes = {SET_NAME: SetSize(rows, rows, questions.shape[0])}
    chunked = rows > _CHUNK_ROWS
    last_log = time.monotonic()
    with SplitWriter(split_dir, metadata, sizes) as writer:
        for chunk_q, chunk_a in _train_chunks(questions, labels, size, augment, relabel):
            writer.append(SET_NAME, single_example_arrays(chunk_q, chunk_a, group_size))
            done = writer.written(SET_NAME).examples
            now = time.monotonic()
            if chunked and (now - last_log >= _PROGRESS_SECONDS or done == rows):
                last_log = now
                log(f"maze: {split_dir.name} examples written: {done}/{rows}")
    return rows


def _npy_bytes(shape: tuple[int, ...]) -> int:
    """The size of a uint8 ``.npy`` file of ``shape`` as np.save writes it."""
    header = {"descr": "|u1", "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return len(buffer.getvalue()) + int(np.prod(shape))


def _read_csv(
    o: MazeBuildOptions, size: int, seed: int, log: Callable[[str], None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test ``(questions, labels)`` from the CSV folder, test rows in train dropped."""
    train_file, test_file = csv_files(Path(o.csv).expanduser())
    train_q, train_a = read_maze_csv(train_file, size)
    log(f"maze: read {train_q.shape[0]} mazes from {train_file}")
    test_q, test_a = read_maze_csv(test_file, size)
    log(f"maze: read {test_q.shape[0]} mazes from {test_file}")
    train_q, train_a = random_subset((train_q, train_a), o.count, stream_seed(seed, _TRAIN_SUBSET))
    test_q, test_a = random_subset((test_q, test_a), o.test_count, stream_seed(seed, _TEST_SUBSET))
    if train_q.shape[0] == 0 or test_q.shape[0] == 0:
        raise TrmError(f"{o.csv} gives an empty train or test set (data.generate.csv)")
    if o.augment:
        train_keys = {_canonical(q, size) for q in train_q}
        in_train = np.array([_canonical(q, size) in train_keys for q in test_q])
    else:
        train_keys = {_digest(q.tobytes()) for q in train_q}
        in_train = np.array([_digest(q.tobytes()) in train_keys for q in test_q])
    if in_train.any():
        log(f"maze: dropped {int(in_train.sum())} test mazes that are also in train")
        test_q, test_a = test_q[~in_train], test_a[~in_train]
    if test_q.shape[0] == 0:
        raise TrmError(f"every test maze of {o.csv} is also in train (data.generate.csv)")
    return train_q, train_a, test_q, test_a


class MazeSource:
    """Mazes with a shortest S-G path, in the reference token encoding (vocab 6)."""

    name = "maze"
    options_type = MazeBuildOptions
    # --explore's rule when --select is not given: the first trajectory whose path the rules
    # accept (a valid shortest path). On 100 fresh 6x6 mazes (the shipped maze-small, 16
    # trajectories) it gave the most optimal paths at every noise scale, and the most exact
    # answers, or level, at 0.1, 0.3 and 1.0 (benchmarks/results/explore_maze_small_choose.json).
    default_selection = "rules"
    # --explore's noise when --noise is not given. On 500 fresh 6x6 mazes (seed 46, 16
    # trajectories, rules) 1.0 gave 86.0% exact and 91.4% optimal paths, against 84.2% and
    # 89.4% at 0.3 and 82.8% and 87.4% at 0.1
    # (benchmarks/results/explore_maze_small_noise.json).
    default_noise = 1.0

    def validate_options(self, options: MazeBuildOptions) -> None:
        """Raise TrmError for impossible options or a missing ``csv``, before any build."""
        validate_options(options)
        if options.csv:
            csv_files(Path(options.csv).expanduser())

    def dataset_shape(self, options: MazeBuildOptions, seed: int) -> DatasetShape:
        """The train split's shape without building it (a CSV import counts its rows)."""
        p = validate_options(options)
        if options.csv:
            train_file, _ = csv_files(Path(options.csv).expanduser())
            mazes = _rows_taken(options.count, count_rows(train_file))
        else:
            mazes = options.count
        rows = mazes * _group_size(options.augment)
        cells = grid.seq_len(p.size)
        return DatasetShape(
            seq_len=cells,
            vocab_size=grid.VOCAB_SIZE,
            num_puzzle_identifiers=len(IDENTIFIERS),
            total_puzzles=rows,
            total_groups=mazes,
            train_file_bytes=2 * _npy_bytes((rows, cells)),
        )

    def build(
        self,
        options: MazeBuildOptions,
        out_dir: Path,
        seed: int,
        log: Callable[[str], None],
    ) -> None:
        """Write ``out_dir/train``, ``out_dir/test`` and ``out_dir/identifiers.json``.

        Deterministic for the same options and seed, whatever the number of workers.
        """
        o = options
        p = validate_options(o)
        out_dir = Path(out_dir)
        if o.csv:
            train_q, train_a, test_q, test_a = _read_csv(o, p.size, seed, log)
        else:
            workers = resolve_workers(o.workers)
            log(
                f"maze: generating {o.count} train mazes ({p.size}x{p.size}, {p.min_walls}-"
                f"{p.max_walls} walls, shortest path >= {p.min_path} steps) with {workers} "
                "workers"
            )
            taken: set[bytes] = set()
            train_q, train_a = _generate_distinct(
                p, o.count, stream_seed(seed, _TRAIN_STREAM), workers, taken, log, "train mazes"
            )
            log(f"maze: generating {o.test_count} test mazes")
            test_q, test_a = _generate_distinct(
                p,
                o.test_count,
                stream_seed(seed, _TEST_STREAM),
                workers,
                taken,
                log,
                "test mazes",
            )
        relabel = not o.csv
        if o.augment:
            log(
                f"maze: {train_q.shape[0]} train mazes, each with its {o.augment} dihedral versions"
            )
        train_rows = _write_split(
            out_dir / "train", train_q, train_a, p.size, o.augment, relabel, log
        )
        _write_split(out_dir / "test", test_q, test_a, p.size, 0, relabel, log)
        write_identifiers(out_dir, IDENTIFIERS)
        log(
            f"maze: wrote {train_rows} train examples ({train_q.shape[0]} groups) and "
            f"{test_q.shape[0]} test examples"
        )

    def format_grid(self, tokens: np.ndarray) -> str:
        """The maze as text, one line per row (``#`` wall, space open, S, G, ``o`` path)."""
        return grid.render(tokens)

    def format_cells(self, tokens: np.ndarray) -> str:
        """One character a cell in reading order (:meth:`format_grid`'s, without line
        breaks), as :meth:`parse_puzzle` reads them."""
        return grid.tokens_to_chars(np.asarray(tokens).ravel())

    def cell_encoding(self, seq_len: int) -> dict[str, Any]:
        """How a maze of ``seq_len`` cells is laid out and tokenised, for a reader with no
        Python (the ONNX solver's card): ``grid`` rows and cols; ``vocab`` each kind of
        cell's token and character (the path only in answers)."""
        size = grid.size_from_seq_len(seq_len)
        names = {"wall": grid.WALL, "open": grid.OPEN, "start": grid.START, "goal": grid.GOAL}
        return {
            "grid": {"rows": size, "cols": size},
            "vocab": {
                "size": grid.VOCAB_SIZE,
                "pad": grid.PAD,
                **names,
                "path": grid.PATH,
                "chars": {grid.CHARS[token]: token for token in grid.CHARS},
                "cells": "row by row, one token a cell; a question holds one start and one goal",
            },
        }

    def parse_puzzle(self, text: str, seq_len: int) -> np.ndarray:
        """int32 tokens of a maze given as ``seq_len`` characters or as lines of text."""
        size = grid.size_from_seq_len(seq_len)
        return grid.parse_text(text, size).astype(np.int32)

    def check_answer(self, question: np.ndarray, answer: np.ndarray) -> bool:
        """True when the answer's ``o`` cells form a shortest S-G path of the question."""
        return grid.path_quality(question, answer)[1]

    def dataset_problem(
        self, metadata: PuzzleDatasetMetadata, inputs: np.ndarray, labels: np.ndarray
    ) -> str | None:
        """Why a dataset (its metadata and first rows) is not mazes: rows that are not a
        square, another vocabulary than the maze's 6 tokens, a label whose ``o`` cells are
        not a path from S to G of its maze. None when it reads as mazes."""
        try:
            grid.size_from_seq_len(metadata.seq_len)
        except TrmError:
            return f"its rows of {metadata.seq_len} cells are not a square maze"
        if metadata.vocab_size != grid.VOCAB_SIZE:
            return (
                f"its vocabulary has {metadata.vocab_size} tokens, a maze's has {grid.VOCAB_SIZE}"
            )
        for row, (question, answer) in enumerate(zip(inputs, labels, strict=True)):
            if not grid.path_quality(question, answer)[0]:
                return f"the label of train row {row} is not a path from S to G of its maze"
        return None

    def path_quality(self, question: np.ndarray, answer: np.ndarray) -> tuple[bool, bool]:
        """``(valid, optimal)``: see :func:`trm.plugins.tasks.maze.grid.path_quality`."""
        return grid.path_quality(question, answer)

    def answer_symmetries(
        self, seq_len: int, count: int, rng: np.random.Generator
    ) -> list[CellSymmetry]:
        """``count`` of a square maze's dihedral maps other than the identity, in an order
        drawn with ``rng`` (:func:`trm.plugins.tasks.maze.grid.dihedral_symmetries`). They
        keep a path's validity and length, not the label's tie-break between shortest paths:
        an answer accepted under one is a shortest path, perhaps another than the label's.
        TrmError when ``seq_len`` is not a square maze."""
        return grid.dihedral_symmetries(grid.size_from_seq_len(seq_len), count, rng)

    def is_solvable(self, question: np.ndarray) -> bool:
        """True when the question has one S and one G joined through non-wall cells."""
        return grid.shortest_distance(np.asarray(question).ravel()) is not None

    def task_metrics(
        self, inputs: np.ndarray, labels: np.ndarray, predictions: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Per-row float64 0/1 arrays ``valid_path_rate`` and ``optimal_path_rate``.

        ``inputs``, ``labels`` and ``predictions`` are ``[B, seq_len]`` tokens; only the
        predicted ``o`` cells are judged (:func:`trm.plugins.tasks.maze.grid.path_quality`), so what
        is predicted on other cells does not matter. ``labels`` is not needed (the path is
        checked against the question itself).
        """
        inputs = np.asarray(inputs)
        predictions = np.asarray(predictions)
        rows = inputs.shape[0]
        valid = np.zeros(rows, dtype=np.float64)
        optimal = np.zeros(rows, dtype=np.float64)
        for i in range(rows):
            valid[i], optimal[i] = grid.path_quality(inputs[i], predictions[i])
        return {"valid_path_rate": valid, "optimal_path_rate": optimal}
