"""The puzzle-dataset directory format of the reference TRM/HRM code: read, validate, write.

A dataset root ``DIR`` holds ``identifiers.json`` (a JSON list of puzzle-identifier names) and
one directory per split (``DIR/train``, ``DIR/test``). A split directory holds ``dataset.json``
(:class:`PuzzleDatasetMetadata`) and, for each set name ``S`` in ``sets``, five ``.npy`` arrays:

- ``S__inputs.npy`` and ``S__labels.npy``: ``[n_examples, seq_len]`` integer tokens;
- ``S__puzzle_identifiers.npy``: ``[n_puzzles]`` int32, each in ``[0, num_puzzle_identifiers)``;
- ``S__puzzle_indices.npy``: ``[n_puzzles + 1]`` int32 example start offsets (0 … n_examples);
- ``S__group_indices.npy``: ``[n_groups + 1]`` int32 puzzle start offsets (0 … n_puzzles).

Directories written by the reference builders open unchanged, and :func:`write_split` writes
files the reference's pydantic loader accepts. :class:`SplitWriter` writes the same files chunk by
chunk, for splits larger than memory. ``total_puzzles`` is optional on reading (HRM-era datasets
lack it); it is then taken from the arrays.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np
from attrs import evolve, field, frozen

from trm.errors import TrmError

ARRAY_NAMES = ("inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices")
INDEX_ARRAY_NAMES = ("puzzle_identifiers", "puzzle_indices", "group_indices")
METADATA_FILE = "dataset.json"
IDENTIFIERS_FILE = "identifiers.json"
# The largest count an int32 index array can hold.
_INT32_MAX = int(np.iinfo(np.int32).max)

# Token-range checks read at most this many bytes of one token array (in evenly spaced chunks).
_RANGE_CHECK_BYTES = 256 * 2**20
_RANGE_CHECK_CHUNKS = 64

_INT_KEYS = (
    "seq_len",
    "vocab_size",
    "pad_id",
    "blank_identifier_id",
    "num_puzzle_identifiers",
    "total_groups",
)


@frozen
class PuzzleDatasetMetadata:
    """The contents of ``dataset.json``; field names are the reference's."""

    seq_len: int
    vocab_size: int
    pad_id: int
    ignore_label_id: int | None
    blank_identifier_id: int
    num_puzzle_identifiers: int
    total_groups: int
    mean_puzzle_examples: float
    total_puzzles: int
    sets: tuple[str, ...] = field(converter=tuple)

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON object written to ``dataset.json`` (``sets`` as a list, mean as a float)."""
        return {
            "pad_id": self.pad_id,
            "ignore_label_id": self.ignore_label_id,
            "blank_identifier_id": self.blank_identifier_id,
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "num_puzzle_identifiers": self.num_puzzle_identifiers,
            "total_groups": self.total_groups,
            "mean_puzzle_examples": float(self.mean_puzzle_examples),
            "total_puzzles": self.total_puzzles,
            "sets": list(self.sets),
        }


@frozen(eq=False)
class PuzzleSet:
    """One set of a split: the five arrays (token arrays memory-mapped, read-only)."""

    name: str
    inputs: np.ndarray
    labels: np.ndarray
    puzzle_identifiers: np.ndarray
    puzzle_indices: np.ndarray
    group_indices: np.ndarray

    @property
    def num_examples(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def num_puzzles(self) -> int:
        return int(self.puzzle_identifiers.shape[0])

    @property
    def num_groups(self) -> int:
        return int(self.group_indices.shape[0]) - 1

    def puzzle_of_examples(self, example_indices: np.ndarray) -> np.ndarray:
        """The puzzle index (row of ``puzzle_identifiers``) of each given example index."""
        return np.searchsorted(self.puzzle_indices, example_indices, side="right") - 1


@frozen(eq=False)
class PuzzleSplit:
    """An opened, validated split directory (``DIR/train`` or ``DIR/test``)."""

    path: Path
    metadata: PuzzleDatasetMetadata
    sets: dict[str, PuzzleSet]

    @property
    def num_examples(self) -> int:
        return sum(s.num_examples for s in self.sets.values())

    @property
    def num_groups(self) -> int:
        return sum(s.num_groups for s in self.sets.values())

    def example_indices(self) -> list[tuple[str, np.ndarray]]:
        """Every example in order: ``(set name, int64 indices 0..n-1)`` per set, sets in order."""
        return [(name, np.arange(s.num_examples, dtype=np.int64)) for name, s in self.sets.items()]


class _FormatError(Exception):
    """A split that breaks the format; the message names the file and what is wrong."""


def open_split(path: Path) -> PuzzleSplit:
    """Open and validate the split directory ``path``; raise TrmError with one clear line.

    Shapes and index arrays are checked fully; token ranges are checked with min/max on the
    memory-mapped arrays (evenly spaced chunks for arrays over 256 MiB).
    """
    path = Path(path)
    if not path.is_dir():
        if path.exists():
            raise TrmError(f"data directory {path} is not a directory; fix data.dir")
        raise TrmError(
            f"data directory {path} does not exist; build one with "
            f"`trm data build sudoku --out {path.parent}` or fix data.dir"
        )
    try:
        metadata = _read_metadata(path / METADATA_FILE)
        sets = {name: _load_set(path, name) for name in metadata.sets}
        metadata = _check_split(path, metadata, sets)
    except _FormatError as error:
        message = str(error).replace("\n", " ")
        raise TrmError(f"{message}; rebuild the dataset") from None
    return PuzzleSplit(path=path, metadata=metadata, sets=sets)


def write_split(
    path: Path,
    metadata: PuzzleDatasetMetadata,
    arrays_by_set: Mapping[str, Mapping[str, np.ndarray]],
) -> None:
    """Write a split directory in the reference layout (arrays first, ``dataset.json`` last).

    ``arrays_by_set`` maps each name of ``metadata.sets`` to its five arrays. Token arrays keep
    their integer dtype; index arrays are written as int32. Raises ValueError (a bug in the
    caller) when the arrays or metadata break the format.
    """
    path = Path(path)
    if list(arrays_by_set) != list(metadata.sets):
        raise ValueError(f"sets {list(arrays_by_set)} differ from metadata.sets {metadata.sets}")
    sets: dict[str, PuzzleSet] = {}
    for name, arrays in arrays_by_set.items():
        missing = [a for a in ARRAY_NAMES if a not in arrays]
        if missing:
            raise ValueError(f"set {name!r} lacks arrays {missing}")
        converted = {a: np.asarray(arrays[a]) for a in ARRAY_NAMES}
        for a in INDEX_ARRAY_NAMES:
            converted[a] = converted[a].astype(np.int32)
        sets[name] = PuzzleSet(name=name, **converted)
    try:
        _check_metadata_values(path / METADATA_FILE, metadata)
        _check_split(path, metadata, sets)
    except _FormatError as error:
        raise ValueError(str(error)) from None
    path.mkdir(parents=True, exist_ok=True)
    for name, puzzle_set in sets.items():
        for a in ARRAY_NAMES:
            np.save(path / f"{name}__{a}.npy", getattr(puzzle_set, a))
    with open(path / METADATA_FILE, "w") as f:
        json.dump(metadata.to_json_dict(), f)


@frozen
class SetSize:
    """The declared size of one set for :class:`SplitWriter`: examples, puzzles and groups."""

    examples: int
    puzzles: int
    groups: int


class SplitWriter:
    """Write a split directory chunk by chunk, in :func:`write_split`'s layout and bytes.

    Sizes are declared up front: ``sizes`` maps each name of ``metadata.sets`` (in that order) to
    its :class:`SetSize`. Each array file gets its final ``.npy`` header at once (the header
    ``np.save`` writes), then grows as :meth:`append` adds rows at its end, with plain file writes
    flushed after each chunk: memory is bounded by the chunk, not the split (a memory map of the
    file would keep every written page resident in this process). ``dataset.json`` is written
    last, by :meth:`close`, once every set holds its declared size; until then the split has no
    ``dataset.json`` (a stale one is deleted first), so :func:`open_split` refuses a half-written
    split. As a context manager it calls :meth:`close` on success, :meth:`abort` on an exception.

    A chunk is a run of whole groups given as :func:`write_split` takes a set, with offsets local
    to the chunk (``puzzle_indices`` from 0 to its examples, ``group_indices`` from 0 to its
    puzzles); the writer shifts them. Each chunk is checked in full (dtypes, shapes, token and
    identifier ranges, offsets) before any of it is written. Token arrays are written with
    ``token_dtype`` (a chunk must cast to it safely), index arrays as int32. Raises ValueError (a
    bug in the caller) when the metadata, sizes or a chunk break the format, or a set is short.
    """

    def __init__(
        self,
        path: Path,
        metadata: PuzzleDatasetMetadata,
        sizes: Mapping[str, SetSize],
        token_dtype: Any = np.uint8,
    ) -> None:
        self.path = Path(path)
        self.metadata = metadata
        self.token_dtype = np.dtype(token_dtype)
        if list(sizes) != list(metadata.sets):
            raise ValueError(f"sets {list(sizes)} differ from metadata.sets {metadata.sets}")
        if not np.issubdtype(self.token_dtype, np.integer):
            raise ValueError(f"token_dtype must be an integer dtype, got {self.token_dtype}")
        try:
            _check_metadata_values(self.path / METADATA_FILE, metadata)
        except _FormatError as error:
            raise ValueError(str(error)) from None
        for name, size in sizes.items():
            e, p, g = size.examples, size.puzzles, size.groups
            if not (0 <= g <= p <= e <= _INT32_MAX and (p == 0 or g > 0) and (e == 0 or p > 0)):
                raise ValueError(
                    f"set {name!r}: sizes {size} are impossible (need 0 <= groups <= puzzles <= "
                    f"examples <= {_INT32_MAX}, none empty unless all after it are)"
                )
        groups = sum(size.groups for size in sizes.values())
        puzzles = sum(size.puzzles for size in sizes.values())
        if metadata.total_groups != groups:
            raise ValueError(
                f"metadata.total_groups {metadata.total_groups} but the sets hold {groups}"
            )
        if metadata.total_puzzles >= 0 and metadata.total_puzzles != puzzles:
            raise ValueError(
                f"metadata.total_puzzles {metadata.total_puzzles} but the sets hold {puzzles}"
            )
        self.sizes = dict(sizes)
        self._written = {name: SetSize(0, 0, 0) for name in sizes}
        self._files: dict[tuple[str, str], BinaryIO] = {}
        self._state = "open"
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / METADATA_FILE).unlink(missing_ok=True)
        try:
            for name, size in sizes.items():
                shapes = {
                    "inputs": (size.examples, metadata.seq_len),
                    "labels": (size.examples, metadata.seq_len),
                    "puzzle_identifiers": (size.puzzles,),
                    "puzzle_indices": (size.puzzles + 1,),
                    "group_indices": (size.groups + 1,),
                }
                for a in ARRAY_NAMES:
                    file = self.path / f"{name}__{a}.npy"
                    self._files[name, a] = _start_npy(file, self._dtype(a), shapes[a])
                for a in ("puzzle_indices", "group_indices"):
                    self._files[name, a].write(np.zeros(1, dtype=np.int32).tobytes())
        except BaseException:
            self.abort()
            raise

    def written(self, set_name: str) -> SetSize:
        """How much of ``set_name`` has been appended so far."""
        return self._written[set_name]

    def append(self, set_name: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Check one chunk of whole groups of ``set_name`` and add it at the end of its files."""
        if self._state != "open":
            raise ValueError(f"SplitWriter for {self.path} is {self._state}; cannot append")
        if set_name not in self._written:
            raise ValueError(f"set {set_name!r} is not one of {list(self.sizes)}")
        missing = [a for a in ARRAY_NAMES if a not in arrays]
        if missing:
            raise ValueError(f"chunk of set {set_name!r} lacks arrays {missing}")
        chunk = {a: np.asarray(arrays[a]) for a in ARRAY_NAMES}
        done, total = self._written[set_name], self.sizes[set_name]
        part = PuzzleSet(name=set_name, **chunk)
        where = f"chunk of set {set_name!r} at example {done.examples}"
        try:
            _check_set(self.path, self.metadata, part, row_offset=done.examples)
        except _FormatError as error:
            raise ValueError(f"{where}: {error}") from None
        for a in ("inputs", "labels"):
            if not np.can_cast(chunk[a].dtype, self.token_dtype, casting="safe"):
                raise ValueError(
                    f"{where}: {a} has dtype {chunk[a].dtype}, which does not cast safely to "
                    f"the split's {self.token_dtype}"
                )
        after = SetSize(
            done.examples + part.num_examples,
            done.puzzles + part.num_puzzles,
            done.groups + part.num_groups,
        )
        if (
            after.examples > total.examples
            or after.puzzles > total.puzzles
            or after.groups > total.groups
        ):
            raise ValueError(f"{where}: it would take the set to {after}, past its size {total}")
        if part.num_examples == 0:
            return
        values = {
            "inputs": chunk["inputs"].astype(self.token_dtype, copy=False),
            "labels": chunk["labels"].astype(self.token_dtype, copy=False),
            "puzzle_identifiers": chunk["puzzle_identifiers"].astype(np.int32),
            "puzzle_indices": (chunk["puzzle_indices"][1:].astype(np.int64) + done.examples),
            "group_indices": (chunk["group_indices"][1:].astype(np.int64) + done.puzzles),
        }
        try:
            for a in ARRAY_NAMES:
                data = np.ascontiguousarray(values[a], dtype=self._dtype(a))
                self._files[set_name, a].write(data.data)
                self._files[set_name, a].flush()
        except BaseException:
            self.abort()
            raise
        self._written[set_name] = after

    def close(self) -> None:
        """Check every set is complete, close the arrays, then write ``dataset.json``."""
        if self._state != "open":
            raise ValueError(f"SplitWriter for {self.path} is {self._state}; cannot close")
        short = [
            f"{name} holds {self._written[name]} of {size}"
            for name, size in self.sizes.items()
            if self._written[name] != size
        ]
        if short:
            self.abort()
            raise ValueError(f"split {self.path} is incomplete: {'; '.join(short)}")
        try:
            for f in self._files.values():
                f.flush()
                os.fsync(f.fileno())
            for f in self._files.values():
                f.close()
        except BaseException:
            self.abort()
            raise
        self._files = {}
        temporary = self.path / f".{METADATA_FILE}.partial"
        with open(temporary, "w") as f:
            json.dump(self.metadata.to_json_dict(), f)
        os.replace(temporary, self.path / METADATA_FILE)
        self._state = "closed"

    def abort(self) -> None:
        """Close the array files and write no ``dataset.json`` (the split stays unreadable)."""
        self._close_files()
        self._state = "aborted"

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:
            self.abort()
        elif self._state == "open":
            self.close()

    def _dtype(self, array: str) -> np.dtype:
        return self.token_dtype if array in ("inputs", "labels") else np.dtype(np.int32)

    def _close_files(self) -> None:
        files, self._files = self._files, {}
        for f in files.values():
            with contextlib.suppress(OSError):  # aborting anyway: no dataset.json follows
                f.close()


def _start_npy(file: Path, dtype: np.dtype, shape: tuple[int, ...]) -> BinaryIO:
    """Open ``file`` for writing and write the ``.npy`` header ``np.save`` gives such an array."""
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": tuple(int(n) for n in shape),
    }
    f = open(file, "wb")  # noqa: SIM115 - kept open for the writer's appends
    try:
        try:
            np.lib.format.write_array_header_1_0(f, header)
        except ValueError:  # a header too long for format 1.0, as np.save falls back
            f.seek(0)
            f.truncate()
            np.lib.format.write_array_header_2_0(f, header)
    except BaseException:
        f.close()
        raise
    return f


def write_identifiers(root: Path, names: list[str]) -> None:
    """Write ``root/identifiers.json``: the puzzle-identifier names (``["<blank>"]`` for Sudoku)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / IDENTIFIERS_FILE, "w") as f:
        json.dump(list(names), f)


def read_identifiers(root: Path) -> list[str]:
    """Read ``root/identifiers.json``; TrmError if it is missing or not a list of strings."""
    file = Path(root) / IDENTIFIERS_FILE
    try:
        names = json.loads(file.read_text())
    except FileNotFoundError:
        raise TrmError(f"{file} is missing; rebuild the dataset") from None
    except (OSError, ValueError, RecursionError) as error:
        raise TrmError(f"{file} could not be read ({error}); rebuild the dataset") from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TrmError(f"{file} must hold a JSON list of strings; rebuild the dataset")
    return names


def _read_metadata(file: Path) -> PuzzleDatasetMetadata:
    """Parse ``dataset.json``; unknown keys are ignored as the reference's loader does."""
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError:
        raise _FormatError(f"{file} is missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise _FormatError(f"{file} could not be read ({error})") from None
    except ValueError as error:
        raise _FormatError(f"{file} is not valid JSON ({error})") from None
    if not isinstance(raw, dict):
        raise _FormatError(f"{file} must hold a JSON object, not {type(raw).__name__}")
    for key in (*_INT_KEYS, "ignore_label_id", "mean_puzzle_examples", "sets"):
        if key not in raw:
            raise _FormatError(f"{file} lacks the key {key!r}")
    for key in _INT_KEYS:
        _require_int(file, key, raw[key])
    if raw["ignore_label_id"] is not None:
        _require_int(file, "ignore_label_id", raw["ignore_label_id"])
    mean = raw["mean_puzzle_examples"]
    if isinstance(mean, bool) or not isinstance(mean, (int, float)):
        raise _FormatError(f"{file}: mean_puzzle_examples must be a number, got {mean!r}")
    total_puzzles = raw.get("total_puzzles", -1)
    if "total_puzzles" in raw:
        _require_int(file, "total_puzzles", total_puzzles)
    sets = raw["sets"]
    if not isinstance(sets, list) or not sets or not all(isinstance(s, str) for s in sets):
        raise _FormatError(f"{file}: sets must be a non-empty list of strings, got {sets!r}")
    metadata = PuzzleDatasetMetadata(
        seq_len=raw["seq_len"],
        vocab_size=raw["vocab_size"],
        pad_id=raw["pad_id"],
        ignore_label_id=raw["ignore_label_id"],
        blank_identifier_id=raw["blank_identifier_id"],
        num_puzzle_identifiers=raw["num_puzzle_identifiers"],
        total_groups=raw["total_groups"],
        mean_puzzle_examples=float(mean),
        total_puzzles=total_puzzles,
        sets=sets,
    )
    _check_metadata_values(file, metadata, total_puzzles_known="total_puzzles" in raw)
    return metadata


def _require_int(file: Path, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _FormatError(f"{file}: {key} must be an integer, got {value!r}")


def _check_metadata_values(
    file: Path, m: PuzzleDatasetMetadata, total_puzzles_known: bool = True
) -> None:
    """Value ranges of the metadata fields on their own."""
    for key in ("seq_len", "vocab_size", "num_puzzle_identifiers"):
        if getattr(m, key) < 1:
            raise _FormatError(f"{file}: {key} must be at least 1, got {getattr(m, key)}")
    if not 0 <= m.pad_id < m.vocab_size:
        raise _FormatError(f"{file}: pad_id {m.pad_id} is outside [0, vocab_size={m.vocab_size})")
    if not 0 <= m.blank_identifier_id < m.num_puzzle_identifiers:
        raise _FormatError(
            f"{file}: blank_identifier_id {m.blank_identifier_id} is outside "
            f"[0, num_puzzle_identifiers={m.num_puzzle_identifiers})"
        )
    if m.total_groups < 0 or m.mean_puzzle_examples < 0:
        raise _FormatError(f"{file}: total_groups and mean_puzzle_examples must not be negative")
    if total_puzzles_known and m.total_puzzles < 0:
        raise _FormatError(f"{file}: total_puzzles must not be negative, got {m.total_puzzles}")
    if len(set(m.sets)) != len(m.sets):
        raise _FormatError(f"{file}: sets {list(m.sets)} name a set twice")
    for name in m.sets:
        if not name or "/" in name or "\\" in name:
            raise _FormatError(f"{file}: set name {name!r} must be a plain non-empty file prefix")


def _load_set(split_dir: Path, name: str) -> PuzzleSet:
    arrays = {}
    for a in ARRAY_NAMES:
        file = split_dir / f"{name}__{a}.npy"
        if not file.is_file():
            raise _FormatError(f"{file} is missing")
        try:
            arrays[a] = np.load(file, mmap_mode="r")
        except (OSError, ValueError, EOFError) as error:
            raise _FormatError(f"{file} could not be read as a .npy array ({error})") from None
    return PuzzleSet(name=name, **arrays)


def _check_split(
    split_dir: Path, m: PuzzleDatasetMetadata, sets: dict[str, PuzzleSet]
) -> PuzzleDatasetMetadata:
    """Check every set against the metadata; return it with ``total_puzzles`` filled in."""
    for s in sets.values():
        _check_set(split_dir, m, s)
    groups = sum(s.num_groups for s in sets.values())
    if m.total_groups != groups:
        raise _FormatError(
            f"{split_dir / METADATA_FILE} says total_groups {m.total_groups} but the "
            f"group_indices arrays hold {groups} groups"
        )
    if m.total_puzzles < 0:
        m = evolve(m, total_puzzles=sum(s.num_puzzles for s in sets.values()))
    return m


def _check_set(
    split_dir: Path, m: PuzzleDatasetMetadata, s: PuzzleSet, row_offset: int = 0
) -> None:
    """Check one set's arrays; ``row_offset`` is added to row numbers in messages."""

    def file(a: str) -> Path:
        return split_dir / f"{s.name}__{a}.npy"

    for a in ARRAY_NAMES:
        array = getattr(s, a)
        if not np.issubdtype(array.dtype, np.integer):
            raise _FormatError(f"{file(a)} has dtype {array.dtype}; expected integers")
        expected_ndim = 2 if a in ("inputs", "labels") else 1
        if array.ndim != expected_ndim:
            raise _FormatError(
                f"{file(a)} has {array.ndim} dimensions (shape {array.shape}); "
                f"expected {expected_ndim}"
            )
    for a in ("inputs", "labels"):
        width = getattr(s, a).shape[1]
        if width != m.seq_len:
            raise _FormatError(
                f"{file(a)} has rows of length {width} but dataset.json says seq_len {m.seq_len}"
            )
    if s.labels.shape[0] != s.inputs.shape[0]:
        raise _FormatError(
            f"{file('labels')} has {s.labels.shape[0]} rows but {s.name}__inputs.npy has "
            f"{s.inputs.shape[0]}"
        )
    if s.puzzle_indices.shape[0] != s.puzzle_identifiers.shape[0] + 1:
        raise _FormatError(
            f"{file('puzzle_indices')} has {s.puzzle_indices.shape[0]} entries but "
            f"{s.name}__puzzle_identifiers.npy has {s.puzzle_identifiers.shape[0]} puzzles "
            "(expected one more offset than puzzles)"
        )
    _check_offsets(file("puzzle_indices"), np.asarray(s.puzzle_indices), s.num_examples, "examples")
    _check_offsets(file("group_indices"), np.asarray(s.group_indices), s.num_puzzles, "puzzles")
    identifiers = np.asarray(s.puzzle_identifiers)
    if identifiers.size:
        low, high = int(identifiers.min()), int(identifiers.max())
        if low < 0 or high >= m.num_puzzle_identifiers:
            bad = low if low < 0 else high
            raise _FormatError(
                f"{file('puzzle_identifiers')} holds identifier {bad} outside "
                f"[0, num_puzzle_identifiers={m.num_puzzle_identifiers})"
            )
    _check_tokens(file("inputs"), s.inputs, m.vocab_size, None, row_offset)
    _check_tokens(file("labels"), s.labels, m.vocab_size, m.ignore_label_id, row_offset)


def _check_offsets(file: Path, offsets: np.ndarray, end: int, what: str) -> None:
    """Offsets start at 0, strictly increase (no empty entry) and end at ``end``."""
    if offsets.shape[0] < 1 or offsets[0] != 0:
        raise _FormatError(f"{file} must start at 0")
    if offsets[-1] != end:
        raise _FormatError(f"{file} ends at {int(offsets[-1])} but there are {end} {what}")
    steps = np.diff(offsets.astype(np.int64))
    if steps.size and steps.min() <= 0:
        at = int(np.argmax(steps <= 0))
        raise _FormatError(
            f"{file} is not strictly increasing (entry {at + 1} is {int(offsets[at + 1])} "
            f"after {int(offsets[at])})"
        )


def _check_tokens(
    file: Path, tokens: np.ndarray, vocab_size: int, ignore: int | None, row_offset: int = 0
) -> None:
    """Every token (bar ``ignore``) lies in [0, vocab_size); large arrays are sampled."""
    for start, chunk in _sample_rows(tokens):
        values = np.asarray(chunk)
        if ignore is not None and not 0 <= ignore < vocab_size:
            values = values[values != ignore]
        if values.size == 0:
            continue
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            rows = np.nonzero((np.asarray(chunk) == bad).any(axis=1))[0]
            raise _FormatError(
                f"{file} holds token {bad} (row {row_offset + start + int(rows[0])}) outside "
                f"[0, vocab_size={vocab_size})"
            )


def _sample_rows(tokens: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """All rows when small, else evenly spaced row chunks including the first and last rows."""
    rows = tokens.shape[0]
    if rows == 0:
        return []
    row_bytes = max(1, tokens.shape[1] * tokens.dtype.itemsize)
    if rows * row_bytes <= _RANGE_CHECK_BYTES:
        return [(0, tokens)]
    chunk_rows = max(1, _RANGE_CHECK_BYTES // _RANGE_CHECK_CHUNKS // row_bytes)
    starts = np.linspace(0, rows - chunk_rows, _RANGE_CHECK_CHUNKS).astype(np.int64)
    return [(int(a), tokens[int(a) : int(a) + chunk_rows]) for a in np.unique(starts)]


def single_example_arrays(
    inputs: np.ndarray, labels: np.ndarray, group_size: int
) -> dict[str, np.ndarray]:
    """The five arrays of a run of whole groups with one example per puzzle and puzzle
    identifier 0 (a task without per-puzzle embeddings: Sudoku, mazes), ``group_size``
    consecutive puzzles a group."""
    n = inputs.shape[0]
    return {
        "inputs": inputs,
        "labels": labels,
        "puzzle_identifiers": np.zeros(n, dtype=np.int32),
        "puzzle_indices": np.arange(n + 1, dtype=np.int32),
        "group_indices": np.arange(0, n + 1, group_size, dtype=np.int32),
    }
