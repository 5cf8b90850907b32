"""The ``sudoku`` data source: build options, the dataset builder, and puzzle I/O.

``build`` writes ``out_dir/train`` and ``out_dir/test`` with one set ``all`` as the reference
builder does: each train puzzle and its ``augment`` augmented copies form one group, with one
example per puzzle; the test set is never augmented, and no test question appears in train.

Only the base puzzles are held in memory (``count`` x 2 grids): the train split is augmented,
encoded and written a chunk of whole groups at a time (:data:`_CHUNK_ROWS` rows), so a build's
memory does not grow with ``augment``. The test questions are checked against each train chunk
on the way (64-bit row hashes to find candidates, then exact comparison).
"""

from __future__ import annotations

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
    write_split,
)
from trm.data.symmetry import CellSymmetry
from trm.errors import TrmError
from trm.plugins.tasks.sudoku import grid
from trm.plugins.tasks.sudoku.augment import augment_copies
from trm.plugins.tasks.sudoku.csv_import import csv_files, read_sudoku_csv
from trm.plugins.tasks.sudoku.generator import generate_many
from trm.plugins.tasks.sudoku.solver import count_solutions, is_valid_solution
from trm.plugins.tasks.sudoku.symmetry import draw_many

SET_NAME = "all"
IDENTIFIERS = ["<blank>"]
# Fewest clues accepted per size: the known minimum for a unique puzzle.
MIN_CLUES = {4: 4, 6: 8, 9: 17}
# Most clues a generated puzzle keeps when ``clues`` is 0 (the default), per size.
DEFAULT_CLUES = {4: 6, 6: 14, 9: 30}
# Rounds of extra generation when duplicates (or test puzzles found in train) are dropped.
_MAX_ROUNDS = 20
# Independent random streams derived from the build seed.
_TRAIN_STREAM, _TEST_STREAM, _AUGMENT_STREAM, _TRAIN_SUBSET, _TEST_SUBSET = range(5)
# Most train rows (examples) augmented and written at once; a chunk holds whole groups, so at
# least one puzzle and its copies. About 10 MiB per token array for 9x9 grids.
_CHUNK_ROWS = 1 << 17
# Fewest seconds between two progress lines while the train split is written.
_PROGRESS_SECONDS = 5.0
# Odd multipliers of the splitmix64 finaliser, the mixing step of _row_hashes.
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@frozen
class SudokuBuildOptions:
    """Build a Sudoku dataset: generated puzzles, or rows of a sudoku-extreme CSV."""

    size: int = field(default=9, metadata={"help": "grid size: 4, 6 or 9"})
    count: int = field(
        default=1000,
        metadata={"help": "train puzzles; with --csv the train rows to take (0 = all)"},
    )
    test_count: int = field(
        default=1000,
        metadata={"help": "test puzzles; with --csv the test rows to take (0 = all of test.csv)"},
    )
    clues: int = field(
        default=0,
        metadata={
            "help": "most clues a generated puzzle keeps; 0 = the size's default "
            "(4x4: 6, 6x6: 14, 9x9: 30)"
        },
    )
    min_clues: int = field(
        default=0,
        metadata={
            "help": "fewest clues: each generated puzzle's clue count is drawn uniformly "
            "from min_clues to clues (0 = every puzzle has exactly clues)"
        },
    )
    minimal: float = field(
        default=0.0,
        metadata={
            "help": "share of generated puzzles, 0 to 1, carved until no clue can be removed "
            "(minimal puzzles, each with at most clues)"
        },
    )
    min_backtracks: int = field(
        default=0,
        metadata={"help": "hardness: fewest solver guesses a generated puzzle must need"},
    )
    augment: int = field(
        default=0, metadata={"help": "augmented copies per train puzzle (test is never augmented)"}
    )
    csv: str = field(
        default="",
        metadata={
            "help": "sudoku-extreme CSV file or directory (train.csv, test.csv) to read "
            "instead of generating; a single file's last test_count rows are the test set"
        },
    )
    workers: int = field(default=0, metadata={"help": "generator processes (0 = all cores)"})


def max_clues(o: SudokuBuildOptions) -> int:
    """The clue limit a generated puzzle keeps: ``clues``, or the size's default when 0."""
    if o.clues == 0:
        return DEFAULT_CLUES.get(o.size, 0)
    return o.clues


def _clue_words(o: SudokuBuildOptions) -> str:
    """How many clues generated puzzles get, in words, for the build's first log line."""
    words = f"{o.min_clues} to {max_clues(o)} clues" if o.min_clues else f"{max_clues(o)} clues"
    if o.minimal:
        words += f", {o.minimal:.0%} carved to minimal"
    return words


def validate_options(o: SudokuBuildOptions) -> None:
    """Raise TrmError naming ``data.generate.<field>`` for an impossible option."""
    if o.size not in grid.SIZES:
        raise TrmError(f"data.generate.size must be 4, 6 or 9, got {o.size}")
    if o.csv:
        if o.size != 9:
            raise TrmError(
                f"data.generate.size must be 9 with data.generate.csv (sudoku-extreme puzzles "
                f"are 9x9), got {o.size}"
            )
        for name in ("count", "test_count"):
            if getattr(o, name) < 0:
                raise TrmError(
                    f"data.generate.{name} must be 0 (all rows) or more, got {getattr(o, name)}"
                )
    else:
        for name in ("count", "test_count"):
            if getattr(o, name) < 1:
                raise TrmError(f"data.generate.{name} must be at least 1, got {getattr(o, name)}")
        low, high = MIN_CLUES[o.size], o.size * o.size
        if not low <= max_clues(o) <= high:
            raise TrmError(
                f"data.generate.clues must be between {low} and {high} for a {o.size}x{o.size} "
                f"Sudoku (or 0 for the size's default, {DEFAULT_CLUES[o.size]}), got {o.clues}"
            )
        if o.min_clues and not low <= o.min_clues <= max_clues(o):
            raise TrmError(
                f"data.generate.min_clues must be 0 (off) or between {low} and clues "
                f"({max_clues(o)}) for a {o.size}x{o.size} Sudoku, got {o.min_clues}"
            )
        if not 0.0 <= o.minimal <= 1.0:
            raise TrmError(f"data.generate.minimal must be between 0 and 1, got {o.minimal}")
    for name in ("min_backtracks", "augment", "workers"):
        if getattr(o, name) < 0:
            raise TrmError(f"data.generate.{name} must be 0 or more, got {getattr(o, name)}")


def _row_keys(tokens: np.ndarray) -> np.ndarray:
    """One comparable key per token row (for exact-duplicate tests with ``np.isin``)."""
    rows = np.ascontiguousarray(tokens.reshape(tokens.shape[0], -1))
    return rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()


def _row_hashes(tokens: np.ndarray) -> np.ndarray:
    """A uint64 hash per token row: equal rows hash equal; different rows rarely do.

    The row's bytes, zero-padded to whole 64-bit words, are folded in one word at a time:
    ``h = mix(h ^ word)`` with the splitmix64 finaliser as ``mix`` (vectorised over rows, about
    0.15 s per million 81-byte rows). Only a filter: matches are confirmed on the bytes.
    """
    rows = np.ascontiguousarray(tokens.reshape(tokens.shape[0], -1)).view(np.uint8)
    n, width = rows.shape
    words = -(-width // 8)
    padded = np.zeros((n, words * 8), dtype=np.uint8)
    padded[:, :width] = rows
    padded_words = padded.view(np.uint64)
    h = np.full(n, 0x9E3779B97F4A7C15 ^ width, dtype=np.uint64)
    t = np.empty_like(h)
    for j in range(words):
        h ^= padded_words[:, j]
        for shift, multiplier in ((30, _MIX_1), (27, _MIX_2), (31, None)):
            np.right_shift(h, np.uint64(shift), out=t)
            h ^= t
            if multiplier is not None:
                h *= multiplier
    return h


class _RowFinder:
    """Which of a few candidate token rows occur among many rows shown chunk by chunk (exact)."""

    def __init__(self, candidates: np.ndarray) -> None:
        self._keys = _row_keys(candidates)
        self._hashes = np.sort(_row_hashes(candidates))
        self.found = np.zeros(candidates.shape[0], dtype=bool)

    def scan(self, rows: np.ndarray) -> None:
        """Mark the candidates equal to a row of ``rows``."""
        if self._hashes.size == 0 or rows.shape[0] == 0:
            return
        hashes = _row_hashes(rows)
        at = np.minimum(np.searchsorted(self._hashes, hashes), self._hashes.size - 1)
        maybe = self._hashes[at] == hashes
        if maybe.any():
            self.found |= np.isin(self._keys, _row_keys(rows[maybe]))


def _generate_distinct(
    o: SudokuBuildOptions,
    count: int,
    seed: int,
    workers: int,
    exclude: Callable[[np.ndarray], np.ndarray] | None,
    log: Callable[[str], None],
    what: str,
    first: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct generated puzzles whose questions ``exclude`` does not flag.

    ``exclude`` maps a batch of questions to a bool mask (True: drop). ``first``, when given, is
    round 0 already done by the caller: ``generate_many(count, start=0)``'s questions and
    solutions with their mask.
    """
    kept_q: list[np.ndarray] = []
    kept_s: list[np.ndarray] = []
    seen: set[bytes] = set()
    start = 0
    for round_index in range(_MAX_ROUNDS):
        need = count - len(kept_q)
        if need <= 0:
            break
        batch = need if round_index == 0 else need + need // 2 + 16
        if round_index == 0 and first is not None:
            questions, solutions, excluded = first
        else:
            questions, solutions = _generate(o, batch, seed, workers, start, log, what)
            excluded = np.zeros(batch, dtype=bool)
            if exclude is not None:
                excluded = exclude(questions)
        start += batch
        for q, s, skip in zip(questions, solutions, excluded, strict=True):
            key = q.tobytes()
            if skip or key in seen or len(kept_q) == count:
                continue
            seen.add(key)
            kept_q.append(q)
            kept_s.append(s)
        if len(kept_q) < count:
            log(f"sudoku: {what}: {len(kept_q)}/{count} distinct so far; generating more")
    if len(kept_q) < count:
        raise TrmError(
            f"could only generate {len(kept_q)} distinct {o.size}x{o.size} {what} (of {count}) "
            "that are not in the train set; lower data.generate.count or "
            "data.generate.test_count, or raise data.generate.clues"
        )
    return np.stack(kept_q), np.stack(kept_s)


def _generate(
    o: SudokuBuildOptions,
    batch: int,
    seed: int,
    workers: int,
    start: int,
    log: Callable[[str], None],
    what: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Puzzles ``start .. start + batch`` of the stream ``seed``, logging progress."""
    return generate_many(
        batch,
        o.size,
        max_clues(o),
        o.min_backtracks,
        seed=seed,
        workers=workers,
        start=start,
        progress=quarter_progress(log, f"sudoku: {what}", batch),
        min_clues=o.min_clues,
        minimal=o.minimal,
    )


def _read_csv(
    o: SudokuBuildOptions, seed: int, log: Callable[[str], None]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test ``(questions, solutions)`` from the CSV file or directory."""
    train_file, test_file = csv_files(Path(o.csv).expanduser())
    questions, solutions = read_sudoku_csv(train_file)
    log(f"sudoku: read {questions.shape[0]} puzzles from {train_file}")
    if test_file is None:
        rows = questions.shape[0]
        if rows < 2:
            raise TrmError(
                f"{train_file} holds {rows} puzzle rows; a single CSV file needs at least 2 "
                "to split into train and test (data.generate.csv)"
            )
        if not 1 <= o.test_count < rows:
            raise TrmError(
                f"data.generate.test_count must be between 1 and {rows - 1} to split the "
                f"{rows} rows of {train_file} into train and test, got {o.test_count}"
            )
        test_q, test_s = questions[-o.test_count :], solutions[-o.test_count :]
        questions, solutions = questions[: -o.test_count], solutions[: -o.test_count]
    else:
        test_q, test_s = read_sudoku_csv(test_file)
        log(f"sudoku: read {test_q.shape[0]} puzzles from {test_file}")
        test_q, test_s = random_subset(
            (test_q, test_s), o.test_count, stream_seed(seed, _TEST_SUBSET)
        )
    train_q, train_s = random_subset(
        (questions, solutions), o.count, stream_seed(seed, _TRAIN_SUBSET)
    )
    if train_q.shape[0] == 0 or test_q.shape[0] == 0:
        raise TrmError(f"{o.csv} gives an empty train or test set (data.generate.csv)")
    return train_q, train_s, test_q, test_s


def _augmented(
    questions: np.ndarray, solutions: np.ndarray, copies: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each puzzle followed by ``copies`` augmentations: ``(n * (copies + 1), size, size)``.

    Draws from ``rng`` puzzle by puzzle, so calls on consecutive slices with one ``rng`` give,
    concatenated, what one call on the whole array gives.
    """
    if copies == 0:
        return questions, solutions
    n, size = questions.shape[0], questions.shape[1]
    out_q = np.empty((n, copies + 1, size, size), dtype=questions.dtype)
    out_s = np.empty_like(out_q)
    out_q[:, 0], out_s[:, 0] = questions, solutions
    for i in range(n):
        out_q[i, 1:], out_s[i, 1:] = augment_copies(questions[i], solutions[i], rng, copies)
    return out_q.reshape(-1, size, size), out_s.reshape(-1, size, size)


def _chunk_puzzles(copies: int) -> int:
    """Puzzles per train chunk: as many whole groups as fit in _CHUNK_ROWS rows, at least one."""
    return max(1, _CHUNK_ROWS // (copies + 1))


def _train_chunks(
    questions: np.ndarray, solutions: np.ndarray, copies: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The train split's digit grids in order, a chunk of whole groups at a time.

    Concatenated, the chunks are ``_augmented(questions, solutions, copies, default_rng(seed))``.
    """
    rng = np.random.default_rng(seed)
    step = _chunk_puzzles(copies)
    for start in range(0, questions.shape[0], step):
        yield _augmented(
            questions[start : start + step], solutions[start : start + step], copies, rng
        )


def _metadata(size: int, n: int, group_size: int) -> PuzzleDatasetMetadata:
    """A split of ``n`` examples, one per puzzle, in groups of ``group_size`` puzzles."""
    return PuzzleDatasetMetadata(
        seq_len=grid.seq_len(size),
        vocab_size=grid.vocab_size(size),
        pad_id=grid.PAD_TOKEN,
        ignore_label_id=grid.IGNORE_LABEL_ID,
        blank_identifier_id=0,
        num_puzzle_identifiers=len(IDENTIFIERS),
        total_groups=n // group_size,
        mean_puzzle_examples=1.0,
        total_puzzles=n,
        sets=[SET_NAME],
    )


def _write(split_dir: Path, questions: np.ndarray, solutions: np.ndarray, group_size: int) -> None:
    """One split held in memory: one example per puzzle, groups of ``group_size`` puzzles."""
    metadata = _metadata(questions.shape[1], questions.shape[0], group_size)
    arrays = single_example_arrays(grid.encode(questions), grid.encode(solutions), group_size)
    write_split(split_dir, metadata, {SET_NAME: arrays})


def _write_train(
    split_dir: Path,
    questions: np.ndarray,
    solutions: np.ndarray,
    copies: int,
    seed: int,
    watch: _RowFinder,
    log: Callable[[str], None],
) -> int:
    """Write the augmented train split chunk by chunk; ``watch`` scans every train question.

    Returns the number of examples written.
    """
    groups, group_size = questions.shape[0], copies + 1
    rows = groups * group_size
    metadata = _metadata(questions.shape[1], rows, group_size)
    chunked = groups > _chunk_puzzles(copies)
    last_log = time.monotonic()
    with SplitWriter(split_dir, metadata, {SET_NAME: SetSize(rows, rows, groups)}) as writer:
        for chunk_q, chunk_s in _train_chunks(questions, solutions, copies, seed):
            inputs = grid.encode(chunk_q)
            watch.scan(inputs)
            writer.append(SET_NAME, single_example_arrays(inputs, grid.encode(chunk_s), group_size))
            done = writer.written(SET_NAME).examples
            now = time.monotonic()
            if chunked and (now - last_log >= _PROGRESS_SECONDS or done == rows):
                last_log = now
                log(f"sudoku: train examples written: {done}/{rows} ({100 * done // rows}%)")
    return rows


def _in_train(
    questions: np.ndarray,
    train_q: np.ndarray,
    train_s: np.ndarray,
    copies: int,
    seed: int,
    log: Callable[[str], None],
) -> np.ndarray:
    """Which ``questions`` are train questions: the train split made again, chunk by chunk."""
    rows = train_q.shape[0] * (copies + 1)
    if rows > _CHUNK_ROWS:
        log(f"sudoku: checking {questions.shape[0]} more test puzzles against {rows} train rows")
    finder = _RowFinder(grid.encode(questions))
    for chunk_q, _ in _train_chunks(train_q, train_s, copies, seed):
        finder.scan(grid.encode(chunk_q))
    return finder.found


class SudokuSource:
    """Sudoku puzzles of size 4, 6 or 9 in the reference token encoding."""

    name = "sudoku"
    options_type = SudokuBuildOptions
    # --explore's rule when --select is not given: the first trajectory the rules accept. On
    # 100 fresh minimal 9x9 puzzles it matched or beat q, halt-first and vote at every N and
    # noise scale (benchmarks/results/explore_sudoku9_laptop_minimal_choose.json).
    default_selection = "rules"

    def validate_options(self, options: SudokuBuildOptions) -> None:
        """Raise TrmError for impossible options or a missing ``csv``, before any build."""
        validate_options(options)
        if options.csv:
            csv_files(Path(options.csv).expanduser())

    def build(
        self,
        options: SudokuBuildOptions,
        out_dir: Path,
        seed: int,
        log: Callable[[str], None],
    ) -> None:
        """Write ``out_dir/train``, ``out_dir/test`` and ``out_dir/identifiers.json``.

        Deterministic for the same options and seed, whatever the number of workers.
        """
        o = options
        validate_options(o)
        out_dir = Path(out_dir)
        workers = resolve_workers(o.workers)
        augment_seed = stream_seed(seed, _AUGMENT_STREAM)
        if o.csv:
            train_q, train_s, test_q, test_s = _read_csv(o, seed, log)
        else:
            log(
                f"sudoku: generating {o.count} train puzzles ({o.size}x{o.size}, "
                f"{_clue_words(o)}, min_backtracks {o.min_backtracks}) with {workers} workers"
            )
            train_q, train_s = _generate_distinct(
                o,
                o.count,
                stream_seed(seed, _TRAIN_STREAM),
                workers,
                None,
                log,
                "train puzzles",
            )
            # The first round of test puzzles, made now so that writing train checks them.
            log(f"sudoku: generating {o.test_count} test puzzles")
            test_stream = stream_seed(seed, _TEST_STREAM)
            test_q, test_s = _generate(
                o, o.test_count, test_stream, workers, 0, log, "test puzzles"
            )
        groups = train_q.shape[0]
        if o.augment:
            log(f"sudoku: {groups} train puzzles with {o.augment} augmented copies each")
        watch = _RowFinder(grid.encode(test_q))
        train_rows = _write_train(
            out_dir / "train", train_q, train_s, o.augment, augment_seed, watch, log
        )
        in_train = watch.found
        if o.csv:
            if in_train.any():
                log(f"sudoku: dropped {int(in_train.sum())} test puzzles that are also in train")
                test_q, test_s = test_q[~in_train], test_s[~in_train]
            if test_q.shape[0] == 0:
                raise TrmError(f"every test puzzle of {o.csv} is also in train (data.generate.csv)")
        else:
            test_q, test_s = _generate_distinct(
                o,
                o.test_count,
                test_stream,
                workers,
                lambda q: _in_train(q, train_q, train_s, o.augment, augment_seed, log),
                log,
                "test puzzles",
                first=(test_q, test_s, in_train),
            )
        _write(out_dir / "test", test_q, test_s, 1)
        write_identifiers(out_dir, IDENTIFIERS)
        log(
            f"sudoku: wrote {train_rows} train examples ({groups} groups) and "
            f"{test_q.shape[0]} test examples"
        )

    def format_grid(self, tokens: np.ndarray) -> str:
        """The grid of one token row with box separators (``?`` marks a non-digit token)."""
        return grid.render(grid.decode(tokens))

    def format_cells(self, tokens: np.ndarray) -> str:
        """One character a cell in reading order, as :meth:`parse_puzzle` reads them: the
        digit, ``.`` for a blank (``?`` marks a non-digit token)."""
        digits = grid.decode(tokens).ravel()
        return "".join("." if d == 0 else "?" if d < 0 else str(int(d)) for d in digits)

    def cell_encoding(self, seq_len: int) -> dict[str, Any]:
        """How a puzzle of ``seq_len`` cells is laid out and tokenised, for a reader with no
        Python (the ONNX solver's card): ``grid`` rows, cols and box; ``vocab`` the pad and
        blank tokens, each digit's token, and the characters read as a blank."""
        size = grid.size_from_seq_len(seq_len)
        box_rows, box_cols = grid.box_shape(size)
        return {
            "grid": {"rows": size, "cols": size, "box": {"rows": box_rows, "cols": box_cols}},
            "vocab": {
                "size": grid.vocab_size(size),
                "pad": grid.PAD_TOKEN,
                "blank": grid.BLANK_TOKEN,
                "blank_chars": ".0",
                "digits": {str(d): d + 1 for d in range(1, size + 1)},
                "cells": "row by row, one token a cell: blank, or the digit plus 1",
            },
        }

    def parse_puzzle(self, text: str, seq_len: int) -> np.ndarray:
        """int32 tokens of a puzzle given as text or a file path; size from ``seq_len``."""
        size = grid.size_from_seq_len(seq_len)
        return grid.encode(grid.parse_text(text, size)).astype(np.int32)

    def check_answer(self, question: np.ndarray, answer: np.ndarray) -> bool:
        """True when the answer tokens solve the question tokens."""
        question = np.asarray(question).ravel()
        answer = np.asarray(answer).ravel()
        if answer.shape != question.shape:
            return False
        q_digits = grid.decode(question)
        if (q_digits < 0).any():
            return False
        return is_valid_solution(q_digits, grid.decode(answer))

    def dataset_problem(
        self, metadata: PuzzleDatasetMetadata, inputs: np.ndarray, labels: np.ndarray
    ) -> str | None:
        """Why a dataset (its metadata and first rows) is not Sudoku puzzles: rows that are
        not a 4x4, 6x6 or 9x9 grid, another vocabulary than the grid's, a label that does
        not solve its puzzle. None when it reads as Sudoku."""
        try:
            size = grid.size_from_seq_len(metadata.seq_len)
        except TrmError:
            return f"its rows of {metadata.seq_len} cells are not a 4x4, 6x6 or 9x9 grid"
        if metadata.vocab_size != grid.vocab_size(size):
            return (
                f"its vocabulary has {metadata.vocab_size} tokens, a {size}x{size} Sudoku's "
                f"has {grid.vocab_size(size)}"
            )
        for row, (question, answer) in enumerate(zip(inputs, labels, strict=True)):
            if not self.check_answer(question, answer):
                return f"the label of train row {row} does not solve its puzzle"
        return None

    def answer_symmetries(
        self, seq_len: int, count: int, rng: np.random.Generator
    ) -> list[CellSymmetry]:
        """``count`` drawn maps that keep a Sudoku's solution (digit relabelling, row and
        column permutations within bands and stacks, band and stack permutations,
        transposition: :mod:`trm.plugins.tasks.sudoku.symmetry`); TrmError when ``seq_len``
        is not a Sudoku grid."""
        return draw_many(grid.size_from_seq_len(seq_len), count, rng)

    def is_solvable(self, question: np.ndarray) -> bool:
        """True when the question tokens (as :meth:`parse_puzzle` returns) have a solution.

        False when two givens already clash or a token is not a blank or a digit; TrmError
        when the row's length is not a Sudoku grid.
        """
        digits = grid.decode(np.asarray(question).ravel())
        if (digits < 0).any():
            return False
        return count_solutions(digits, limit=1) >= 1
