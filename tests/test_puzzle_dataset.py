"""The puzzle-dataset directory format: round trips, reference compatibility, clear errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from trm.data import puzzle_dataset
from trm.data.puzzle_dataset import (
    PuzzleDatasetMetadata,
    open_split,
    read_identifiers,
    write_identifiers,
    write_split,
)
from trm.errors import TrmError

# The fields of the reference's pydantic PuzzleDatasetMetadata and the JSON types it accepts.
REFERENCE_FIELDS = {
    "pad_id": int,
    "ignore_label_id": (int, type(None)),
    "blank_identifier_id": int,
    "vocab_size": int,
    "seq_len": int,
    "num_puzzle_identifiers": int,
    "total_groups": int,
    "mean_puzzle_examples": float,
    "total_puzzles": int,
    "sets": list,
}


def _arrays(examples: int = 12, seq_len: int = 16, vocab: int = 6) -> dict[str, np.ndarray]:
    """Groups of 2 puzzles, puzzles of 2 examples each (the shape of an ARC-style set)."""
    rng = np.random.default_rng(0)
    puzzles = examples // 2
    return {
        "inputs": rng.integers(0, vocab, (examples, seq_len)).astype(np.uint8),
        "labels": rng.integers(0, vocab, (examples, seq_len)).astype(np.uint8),
        "puzzle_identifiers": np.arange(puzzles, dtype=np.int32) % 3,
        "puzzle_indices": np.arange(0, examples + 1, 2, dtype=np.int32),
        "group_indices": np.arange(0, puzzles + 1, 2, dtype=np.int32),
    }


def _metadata(**changes) -> PuzzleDatasetMetadata:
    fields = dict(
        seq_len=16,
        vocab_size=6,
        pad_id=0,
        ignore_label_id=0,
        blank_identifier_id=0,
        num_puzzle_identifiers=3,
        total_groups=3,
        mean_puzzle_examples=2.0,
        total_puzzles=6,
        sets=["all"],
    )
    fields.update(changes)
    return PuzzleDatasetMetadata(**fields)


@pytest.fixture
def split_dir(tmp_path: Path) -> Path:
    write_split(tmp_path / "train", _metadata(), {"all": _arrays()})
    write_identifiers(tmp_path, ["<blank>", "a", "b"])
    return tmp_path / "train"


def test_write_then_open_round_trips_arrays_and_metadata(split_dir: Path) -> None:
    split = open_split(split_dir)
    assert split.metadata == _metadata()
    expected = _arrays()
    for name, array in expected.items():
        np.testing.assert_array_equal(getattr(split.sets["all"], name), array)
    assert split.sets["all"].inputs.dtype == np.uint8
    assert split.num_examples == 12 and split.num_groups == 3
    [(set_name, indices)] = split.example_indices()
    assert set_name == "all"
    np.testing.assert_array_equal(indices, np.arange(12))
    np.testing.assert_array_equal(
        split.sets["all"].puzzle_of_examples(np.array([0, 1, 2, 11])), [0, 0, 1, 5]
    )
    assert read_identifiers(split_dir.parent) == ["<blank>", "a", "b"]


def test_written_json_has_exactly_the_reference_fields_and_types(split_dir: Path) -> None:
    raw = json.loads((split_dir / "dataset.json").read_text())
    assert set(raw) == set(REFERENCE_FIELDS)
    for key, kind in REFERENCE_FIELDS.items():
        assert isinstance(raw[key], kind), key
    assert sorted(p.name for p in split_dir.iterdir()) == sorted(
        ["dataset.json"] + [f"all__{a}.npy" for a in puzzle_dataset.ARRAY_NAMES]
    )


def test_reference_built_split_opens_unchanged(tmp_path: Path) -> None:
    """As the reference Sudoku builder writes it (uint8 tokens; HRM-era json lacks
    total_puzzles and may carry extra keys)."""
    split = tmp_path / "test"
    split.mkdir()
    arrays = _arrays()
    for name, array in arrays.items():
        np.save(split / f"all__{name}.npy", array)
    raw = _metadata().to_json_dict()
    del raw["total_puzzles"]
    raw["num_aug_identifiers"] = 1
    (split / "dataset.json").write_text(json.dumps(raw))
    opened = open_split(split)
    assert opened.metadata.total_puzzles == 6
    assert opened.num_examples == 12


def _rewrite_json(split: Path, **changes) -> None:
    raw = json.loads((split / "dataset.json").read_text())
    for key, value in changes.items():
        if value is _DELETE:
            del raw[key]
        else:
            raw[key] = value
    (split / "dataset.json").write_text(json.dumps(raw))


_DELETE = object()


def _save(split: Path, name: str, array: np.ndarray) -> None:
    np.save(split / f"all__{name}.npy", array)


BAD_CASES: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "missing dataset.json": (
        lambda s: (s / "dataset.json").unlink(),
        ["dataset.json", "is missing"],
    ),
    "missing array file": (
        lambda s: (s / "all__labels.npy").unlink(),
        ["all__labels.npy", "is missing"],
    ),
    "json syntax error": (
        lambda s: (s / "dataset.json").write_text("{not json"),
        ["dataset.json", "not valid JSON"],
    ),
    "json not an object": (
        lambda s: (s / "dataset.json").write_text("[1, 2]"),
        ["must hold a JSON object"],
    ),
    "json missing key": (lambda s: _rewrite_json(s, seq_len=_DELETE), ["lacks the key 'seq_len'"]),
    "json wrong type": (lambda s: _rewrite_json(s, vocab_size="6"), ["vocab_size", "integer"]),
    "json bool for int": (lambda s: _rewrite_json(s, pad_id=True), ["pad_id", "integer"]),
    "json bad sets": (lambda s: _rewrite_json(s, sets="all"), ["sets must be a non-empty list"]),
    "unreadable npy": (
        lambda s: (s / "all__inputs.npy").write_bytes(b"garbage"),
        ["all__inputs.npy", "could not"],
    ),
    "labels fewer rows than inputs": (
        lambda s: _save(s, "labels", _arrays()["labels"][:10]),
        ["all__labels.npy has 10 rows but all__inputs.npy has 12"],
    ),
    "wrong seq_len": (lambda s: _rewrite_json(s, seq_len=15), ["rows of length 16", "seq_len 15"]),
    "float tokens": (
        lambda s: _save(s, "inputs", _arrays()["inputs"].astype(np.float32)),
        ["expected integers"],
    ),
    "puzzle_indices not monotone": (
        lambda s: _save(s, "puzzle_indices", np.array([0, 4, 2, 6, 8, 10, 12], np.int32)),
        ["all__puzzle_indices.npy is not strictly increasing"],
    ),
    "puzzle_indices not ending at examples": (
        lambda s: _save(s, "puzzle_indices", np.array([0, 2, 4, 6, 8, 10, 11], np.int32)),
        ["all__puzzle_indices.npy ends at 11 but there are 12 examples"],
    ),
    "group_indices not ending at puzzles": (
        lambda s: _save(s, "group_indices", np.array([0, 2, 5], np.int32)),
        ["all__group_indices.npy ends at 5 but there are 6 puzzles"],
    ),
    "group_indices not starting at 0": (
        lambda s: _save(s, "group_indices", np.array([1, 2, 4, 6], np.int32)),
        ["start at 0"],
    ),
    "puzzle_indices length": (
        lambda s: _save(s, "puzzle_indices", np.array([0, 6, 12], np.int32)),
        ["expected one more offset than puzzles"],
    ),
    "token above vocab": (
        lambda s: _save(s, "inputs", np.full((12, 16), 6, np.uint8)),
        ["token 6", "vocab_size=6"],
    ),
    "negative label": (lambda s: _save(s, "labels", np.full((12, 16), -1, np.int32)), ["token -1"]),
    "identifier out of range": (
        lambda s: _save(s, "puzzle_identifiers", np.array([0, 1, 2, 3, 0, 0], np.int32)),
        ["identifier 3", "num_puzzle_identifiers=3"],
    ),
    "total_groups mismatch": (
        lambda s: _rewrite_json(s, total_groups=4),
        ["total_groups 4", "hold 3 groups"],
    ),
    "pad_id outside vocab": (lambda s: _rewrite_json(s, pad_id=6), ["pad_id 6"]),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_open_split_reports_each_bad_input_as_one_clear_trm_error(
    split_dir: Path, case: str
) -> None:
    damage, fragments = BAD_CASES[case]
    damage(split_dir)
    with pytest.raises(TrmError) as raised:
        open_split(split_dir)
    message = str(raised.value)
    assert "\n" not in message
    assert message.endswith("rebuild the dataset")
    for fragment in fragments:
        assert fragment in message, message


def test_open_split_of_missing_directory_says_how_to_build_one(tmp_path: Path) -> None:
    with pytest.raises(TrmError, match=r"does not exist; build one with `trm data build sudoku"):
        open_split(tmp_path / "nowhere" / "train")


def test_ignore_label_outside_vocab_is_allowed_in_labels(tmp_path: Path) -> None:
    arrays = _arrays()
    arrays["labels"] = arrays["labels"].astype(np.int32)
    arrays["labels"][:, -1] = -100
    write_split(tmp_path / "train", _metadata(ignore_label_id=-100), {"all": arrays})
    assert open_split(tmp_path / "train").sets["all"].labels[0, -1] == -100


def test_large_token_arrays_are_checked_in_sampled_chunks(
    split_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(puzzle_dataset, "_RANGE_CHECK_BYTES", 64)
    monkeypatch.setattr(puzzle_dataset, "_RANGE_CHECK_CHUNKS", 2)
    open_split(split_dir)
    inputs = _arrays()["inputs"]
    inputs[-1, 3] = 9
    _save(split_dir, "inputs", inputs)
    with pytest.raises(TrmError, match="token 9 \\(row 11\\)"):
        open_split(split_dir)


def test_write_split_rejects_inconsistent_arrays(tmp_path: Path) -> None:
    arrays = _arrays()
    arrays["labels"] = arrays["labels"][:5]
    with pytest.raises(ValueError, match="has 5 rows"):
        write_split(tmp_path / "train", _metadata(), {"all": arrays})
    with pytest.raises(ValueError, match=r"differ from metadata\.sets"):
        write_split(tmp_path / "train", _metadata(), {"other": _arrays()})
    assert not (tmp_path / "train").exists()
