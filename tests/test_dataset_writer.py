"""SplitWriter (a split written chunk by chunk) and the Sudoku builder's chunked, bounded build."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trm.data.generation import stream_seed
from trm.data.puzzle_dataset import (
    ARRAY_NAMES,
    METADATA_FILE,
    PuzzleDatasetMetadata,
    SetSize,
    SplitWriter,
    open_split,
    write_split,
)
from trm.errors import TrmError
from trm.plugins.tasks.sudoku import grid, source
from trm.plugins.tasks.sudoku.generator import generate_many
from trm.plugins.tasks.sudoku.source import SudokuBuildOptions, SudokuSource

SEQ_LEN, VOCAB = 5, 7


def _set_arrays(rng: np.random.Generator, groups: int, dtype: type) -> dict[str, np.ndarray]:
    """A set of uneven groups (1-3 puzzles) of uneven puzzles (1-4 examples)."""
    group_sizes = rng.integers(1, 4, groups)
    examples = rng.integers(1, 5, int(group_sizes.sum()))
    rows = int(examples.sum())
    return {
        "inputs": rng.integers(0, VOCAB, (rows, SEQ_LEN)).astype(dtype),
        "labels": rng.integers(0, VOCAB, (rows, SEQ_LEN)).astype(dtype),
        "puzzle_identifiers": rng.integers(0, 3, examples.size).astype(np.int32),
        "puzzle_indices": np.concatenate([[0], np.cumsum(examples)]).astype(np.int32),
        "group_indices": np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int32),
    }


def _metadata(sets: dict[str, dict[str, np.ndarray]]) -> PuzzleDatasetMetadata:
    return PuzzleDatasetMetadata(
        seq_len=SEQ_LEN,
        vocab_size=VOCAB,
        pad_id=0,
        ignore_label_id=0,
        blank_identifier_id=0,
        num_puzzle_identifiers=3,
        total_groups=sum(a["group_indices"].size - 1 for a in sets.values()),
        mean_puzzle_examples=1.5,
        total_puzzles=sum(a["puzzle_identifiers"].size for a in sets.values()),
        sets=list(sets),
    )


def _size(arrays: dict[str, np.ndarray]) -> SetSize:
    return SetSize(
        arrays["inputs"].shape[0],
        arrays["puzzle_identifiers"].shape[0],
        arrays["group_indices"].shape[0] - 1,
    )


def _chunk(arrays: dict[str, np.ndarray], g0: int, g1: int) -> dict[str, np.ndarray]:
    """Groups ``g0 .. g1`` of a set, with offsets local to the chunk."""
    p0, p1 = int(arrays["group_indices"][g0]), int(arrays["group_indices"][g1])
    e0, e1 = int(arrays["puzzle_indices"][p0]), int(arrays["puzzle_indices"][p1])
    return {
        "inputs": arrays["inputs"][e0:e1],
        "labels": arrays["labels"][e0:e1],
        "puzzle_identifiers": arrays["puzzle_identifiers"][p0:p1],
        "puzzle_indices": arrays["puzzle_indices"][p0 : p1 + 1] - e0,
        "group_indices": arrays["group_indices"][g0 : g1 + 1] - p0,
    }


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_writer_gives_the_bytes_write_split_gives_with_uneven_chunks(
    tmp_path: Path, dtype: type
) -> None:
    rng = np.random.default_rng(3)
    sets = {"all": _set_arrays(rng, 9, dtype), "extra": _set_arrays(rng, 4, dtype)}
    metadata = _metadata(sets)
    write_split(tmp_path / "whole", metadata, sets)
    sizes = {name: _size(arrays) for name, arrays in sets.items()}
    with SplitWriter(tmp_path / "chunked", metadata, sizes, token_dtype=dtype) as writer:
        # Uneven chunks of whole groups, an empty one, and the two sets interleaved.
        for name, g0, g1 in [("all", 0, 1), ("extra", 0, 3), ("all", 1, 1), ("all", 1, 5)]:
            writer.append(name, _chunk(sets[name], g0, g1))
        writer.append("all", _chunk(sets["all"], 5, 9))
        writer.append("extra", _chunk(sets["extra"], 3, 4))
        assert not (tmp_path / "chunked" / METADATA_FILE).exists()  # only once complete
    for name in sets:
        for a in ARRAY_NAMES:
            whole_file = tmp_path / "whole" / f"{name}__{a}.npy"
            chunked_file = tmp_path / "chunked" / whole_file.name
            whole, chunked = np.load(whole_file), np.load(chunked_file)
            assert whole.dtype == chunked.dtype
            np.testing.assert_array_equal(whole, chunked)
            assert whole_file.read_bytes() == chunked_file.read_bytes()
    whole_json = json.loads((tmp_path / "whole" / METADATA_FILE).read_text())
    assert json.loads((tmp_path / "chunked" / METADATA_FILE).read_text()) == whole_json
    split = open_split(tmp_path / "chunked")
    assert split.num_examples == sum(s.examples for s in sizes.values())
    assert isinstance(split.sets["all"].inputs, np.memmap)


def test_an_interrupted_or_short_split_has_no_dataset_json_and_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    arrays = _set_arrays(rng, 6, np.uint8)
    metadata = _metadata({"all": arrays})
    sizes = {"all": _size(arrays)}
    write_split(tmp_path / "split", metadata, {"all": arrays})  # a whole split was there before
    with pytest.raises(KeyboardInterrupt), SplitWriter(tmp_path / "split", metadata, sizes) as w:
        w.append("all", _chunk(arrays, 0, 2))
        raise KeyboardInterrupt
    assert not (tmp_path / "split" / METADATA_FILE).exists()
    with pytest.raises(TrmError, match=r"dataset\.json is missing; rebuild the dataset"):
        open_split(tmp_path / "split")

    writer = SplitWriter(tmp_path / "short", metadata, sizes)
    writer.append("all", _chunk(arrays, 0, 5))
    with pytest.raises(ValueError, match="incomplete"):
        writer.close()
    with pytest.raises(TrmError, match=r"dataset\.json is missing"):
        open_split(tmp_path / "short")


def test_writer_rejects_bad_chunks_before_writing_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    arrays = _set_arrays(rng, 4, np.uint8)
    metadata = _metadata({"all": arrays})
    writer = SplitWriter(tmp_path / "split", metadata, {"all": _size(arrays)})
    first = _chunk(arrays, 0, 1)
    writer.append("all", first)
    done = first["inputs"].shape[0]
    good = _chunk(arrays, 1, 4)
    bad_token = {**good, "inputs": good["inputs"].copy()}
    bad_token["inputs"][1, 2] = VOCAB
    backwards = {**good, "puzzle_indices": good["puzzle_indices"][::-1].copy()}
    repeated = {**good, "group_indices": good["group_indices"].copy()}
    repeated["group_indices"][1] = 0
    cases = [
        (bad_token, f"holds token {VOCAB} \\(row {done + 1}\\)"),
        ({**good, "inputs": good["inputs"][:, :-1]}, "rows of length 4"),
        ({**good, "labels": good["labels"].astype(np.int64)}, "does not cast safely"),
        (backwards, "must start at 0"),
        (repeated, "not strictly increasing"),
        ({**good, "puzzle_identifiers": good["puzzle_identifiers"] + 3}, "identifier"),
        (_chunk(arrays, 0, 4), "past its size"),
    ]
    for chunk, fragment in cases:
        with pytest.raises(ValueError, match=fragment):
            writer.append("all", chunk)
    assert writer.written("all") == SetSize(done, first["puzzle_identifiers"].size, 1)
    writer.append("all", good)
    writer.close()
    np.testing.assert_array_equal(
        open_split(tmp_path / "split").sets["all"].inputs, arrays["inputs"]
    )
    with pytest.raises(ValueError, match="closed"):
        writer.append("all", good)
    with pytest.raises(ValueError, match="total_groups"):
        SplitWriter(tmp_path / "other", metadata, {"all": SetSize(3, 2, 1)})


# --- the Sudoku builder -----------------------------------------------------------------------


def _build(out: Path, options: SudokuBuildOptions, seed: int) -> list[str]:
    lines: list[str] = []
    SudokuSource().build(options, out, seed, lines.append)
    return lines


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()
    }


def _keys(tokens: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in np.asarray(tokens)}


def _csv(directory: Path) -> Path:
    """A CSV folder whose test.csv repeats two train questions (they must be dropped)."""
    q, s = generate_many(14, 9, 30, seed=11, workers=1)

    def row(i: int) -> str:
        question = "".join(str(d) if d else "." for d in q[i].ravel())
        return f"x,{question},{''.join(str(d) for d in s[i].ravel())},0"

    directory.mkdir()
    header = "source,question,answer,rating\n"
    (directory / "train.csv").write_text(header + "\n".join(row(i) for i in range(10)) + "\n")
    (directory / "test.csv").write_text(header + "\n".join(row(i) for i in (10, 3, 11, 7)) + "\n")
    return directory


@pytest.mark.parametrize("kind", ["generated", "csv"])
def test_a_build_in_small_chunks_equals_one_big_chunk_and_the_unchunked_augmentation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    if kind == "generated":  # 4x4 puzzles with 4 clues: augmented train holds many test draws
        options = SudokuBuildOptions(
            size=4, count=60, test_count=25, clues=4, augment=300, workers=1
        )
    else:
        options = SudokuBuildOptions(csv=str(_csv(tmp_path / "csv")), test_count=0, augment=5)
    seed = 8
    monkeypatch.setattr(source, "_CHUNK_ROWS", 10**9)
    big = _build(tmp_path / "big", options, seed)
    monkeypatch.setattr(source, "_CHUNK_ROWS", 2 * (options.augment + 1) - 1)  # 1 puzzle a chunk
    monkeypatch.setattr(source, "_PROGRESS_SECONDS", 0.0)
    small = _build(tmp_path / "small", options, seed)
    assert _files(tmp_path / "small") == _files(tmp_path / "big")
    assert any("train examples written" in line for line in small)
    assert not any("train examples written" in line for line in big)

    train = open_split(tmp_path / "small/train").sets["all"]
    test = open_split(tmp_path / "small/test").sets["all"]
    group, size = options.augment + 1, grid.size_from_seq_len(train.inputs.shape[1])
    base_q = (np.asarray(train.inputs[::group]) - 1).reshape(-1, size, size)  # copy 0 of each
    base_s = (np.asarray(train.labels[::group]) - 1).reshape(-1, size, size)
    rng = np.random.default_rng(stream_seed(seed, source._AUGMENT_STREAM))
    whole_q, whole_s = source._augmented(base_q, base_s, options.augment, rng)
    np.testing.assert_array_equal(train.inputs, grid.encode(whole_q))
    np.testing.assert_array_equal(train.labels, grid.encode(whole_s))

    train_keys = _keys(train.inputs)
    assert not train_keys & _keys(test.inputs)
    if kind == "csv":
        assert test.num_examples == 2 and any("dropped 2 test" in line for line in big)
        return
    # The test set is the one exact exclusion over every train question gives.
    assert any("distinct so far" in line for line in big)  # exclusion did drop test draws
    expected_q, _ = source._generate_distinct(
        options,
        options.test_count,
        stream_seed(seed, source._TEST_STREAM),
        1,
        lambda q: np.array([row.tobytes() in train_keys for row in grid.encode(q)]),
        lambda _: None,
        "test puzzles",
    )
    np.testing.assert_array_equal(test.inputs, grid.encode(expected_q))


def test_row_hashes_are_equal_for_equal_rows_and_collisions_never_change_the_test_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = np.random.default_rng(0).integers(0, 11, (5000, 81)).astype(np.uint8)
    hashes = source._row_hashes(np.concatenate([rows, rows[:100]]))
    np.testing.assert_array_equal(hashes[:100], hashes[-100:])
    assert np.unique(hashes[:5000]).size == np.unique(rows, axis=0).shape[0]

    options = SudokuBuildOptions(size=4, count=30, test_count=20, clues=4, augment=100, workers=1)
    _build(tmp_path / "real", options, 2)
    monkeypatch.setattr(source, "_row_hashes", lambda t: np.zeros(t.shape[0], dtype=np.uint64))
    _build(tmp_path / "colliding", options, 2)  # every row collides with every test puzzle
    assert _files(tmp_path / "colliding") == _files(tmp_path / "real")


# The child reports VmHWM, the peak RSS of its own address space: ru_maxrss (RUSAGE_SELF in the
# child or RUSAGE_CHILDREN here) would include the RSS of this process as it was when forked.
_CHILD = """
import json, sys
from pathlib import Path
from trm.plugins.tasks.sudoku.source import SudokuBuildOptions, SudokuSource
options = SudokuBuildOptions(count=2200, augment=1000, test_count=10, workers=1)
SudokuSource().build(options, Path(sys.argv[1]), 0, lambda line: None)
status = Path("/proc/self/status").read_text().splitlines()
peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"peak_kib": peak_kib}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
@pytest.mark.slow
def test_a_large_build_stays_far_below_its_size_in_memory(tmp_path: Path) -> None:
    out = tmp_path / "data"
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(out)], capture_output=True, text=True, check=True
        )
        peak = json.loads(done.stdout.splitlines()[-1])["peak_kib"] * 1024
        train = out / "train"
        dataset = sum((train / f"all__{a}.npy").stat().st_size for a in ("inputs", "labels"))
        print(f"peak RSS {peak / 2**20:.0f} MiB building {dataset / 2**20:.0f} MiB inputs+labels")
        assert open_split(train).num_examples == 2200 * 1001
        # The whole-array build held every augmented grid at once: about 1 GiB peak here.
        assert peak < dataset / 2
    finally:
        shutil.rmtree(out, ignore_errors=True)  # 360 MB that pytest would otherwise keep
