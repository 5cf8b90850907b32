"""The ARC plugin's data half: grids (encoding, dihedral ids, colour maps, names)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from trm.plugins.arc import grids


def _grid_strategy(max_side: int = 30) -> st.SearchStrategy[np.ndarray]:
    shape = st.tuples(st.integers(1, max_side), st.integers(1, max_side))
    return shape.flatmap(lambda s: arrays(np.uint8, s, elements=st.integers(0, 9)))


def _colour_maps() -> st.SearchStrategy[np.ndarray]:
    perm = st.permutations(list(range(1, 10)))
    return perm.map(lambda p: np.array([0, *p], dtype=np.uint8))


# --- dihedral ids: the reference's numbering ---------------------------------------------------


def test_dihedral_ids_follow_the_reference_numbering():
    g = np.arange(6, dtype=np.uint8).reshape(2, 3)  # [[0 1 2] [3 4 5]]
    expected = {
        0: [[0, 1, 2], [3, 4, 5]],
        1: [[2, 5], [1, 4], [0, 3]],  # rot90 counter-clockwise
        2: [[5, 4, 3], [2, 1, 0]],
        3: [[3, 0], [4, 1], [5, 2]],
        4: [[2, 1, 0], [5, 4, 3]],  # flip left-right
        5: [[3, 4, 5], [0, 1, 2]],  # flip up-down
        6: [[0, 3], [1, 4], [2, 5]],  # transpose
        7: [[5, 2], [4, 1], [3, 0]],  # anti-transpose
    }
    for k, want in expected.items():
        assert grids.dihedral(g, k).tolist() == want, k


def test_dihedral_rejects_an_unknown_id():
    with pytest.raises(ValueError):
        grids.dihedral(np.zeros((2, 2), np.uint8), 8)


@settings(max_examples=60, deadline=None)
@given(grid=_grid_strategy(), cmap=_colour_maps())
def test_augment_then_unaugment_is_identity_for_all_8_transforms(grid, cmap):
    for k in range(8):
        assert np.array_equal(grids.inverse_dihedral(grids.dihedral(grid, k), k), grid)
        augmented = grids.augment(grid, k, cmap)
        assert augmented.dtype == np.uint8
        assert np.array_equal(grids.unaugment(augmented, k, cmap), grid)


def test_augment_recolours_before_transforming():
    g = np.array([[0, 1], [2, 3]], dtype=np.uint8)
    cmap = np.array([0, 2, 3, 1, 4, 5, 6, 7, 8, 9], dtype=np.uint8)
    assert grids.augment(g, 4, cmap).tolist() == [[2, 0], [1, 3]]


# --- names ---------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(k=st.integers(0, 7), cmap=_colour_maps(), task=st.sampled_from(["007bbfb7", "x", "a-b"]))
def test_names_round_trip(k, cmap, task):
    task_id, k2, cmap2 = grids.parse_name(grids.augmented_name(task, k, cmap))
    assert (task_id, k2) == (task, k)
    assert np.array_equal(cmap2, cmap)


def test_name_format_matches_the_reference():
    cmap = np.array([0, 3, 1, 2, 4, 5, 6, 7, 8, 9], dtype=np.uint8)
    assert grids.augmented_name("007bbfb7", 6, cmap) == "007bbfb7|||t6|||0312456789"


def test_plain_name_is_the_original_task():
    task_id, k, cmap = grids.parse_name("007bbfb7")
    assert (task_id, k, cmap.tolist()) == ("007bbfb7", 0, list(range(10)))


@pytest.mark.parametrize(
    "bad",
    [
        "abc|||t8|||0123456789",
        "abc|||x1|||0123456789",
        "abc|||t1|||012345678",
        "abc|||t1|||1023456789",  # 0 must stay 0
        "abc|||t1|||0113456789",  # not a permutation
        "abc|||t1",
        "|||t1|||0123456789",
        "a|||b|||t1|||0123456789",
    ],
)
def test_malformed_names_raise_value_error(bad):
    with pytest.raises(ValueError):
        grids.parse_name(bad)


# --- encode / decode -----------------------------------------------------------------------


def test_encode_places_colours_and_eos_like_the_reference():
    g = np.array([[0, 9], [5, 1]], dtype=np.uint8)
    view = grids.encode(g, top=1, left=2).reshape(30, 30)
    assert view[1:3, 2:4].tolist() == [[2, 11], [7, 3]]
    assert view[3, 2:4].tolist() == [1, 1]  # row just below
    assert view[1:3, 4].tolist() == [1, 1]  # column just right
    assert view[3, 4] == grids.PAD  # the diagonal corner stays PAD
    assert int((view == grids.EOS).sum()) == 4
    assert int((view >= 2).sum()) == 4


def test_encode_full_grid_has_no_eos():
    g = np.full((30, 30), 3, dtype=np.uint8)
    tokens = grids.encode(g)
    assert tokens.shape == (900,) and tokens.dtype == np.uint8
    assert not (tokens == grids.EOS).any()


def test_encode_rejects_a_grid_that_does_not_fit():
    with pytest.raises(ValueError):
        grids.encode(np.zeros((5, 5), np.uint8), top=26)


@settings(max_examples=80, deadline=None)
@given(grid=_grid_strategy())
def test_decode_inverts_encode_at_the_origin(grid):
    assert np.array_equal(grids.decode(grids.encode(grid)), grid)


def test_decode_takes_the_largest_top_left_rectangle():
    view = np.zeros((30, 30), dtype=np.uint8)
    view[0, :5] = 2  # one row, 5 wide: area 5
    view[1:4, :2] = 3  # three more rows 2 wide: area 4 x 2 = 8
    got = grids.decode(view.reshape(900))
    assert got.shape == (4, 2)
    assert got.tolist() == [[0, 0], [1, 1], [1, 1], [1, 1]]


def test_decode_without_a_colour_at_the_top_left_is_none():
    tokens = grids.encode(np.ones((3, 3), np.uint8), top=1, left=0)
    assert grids.decode(tokens) is None
    assert grids.decode(np.zeros(900, np.uint8)) is None


def test_grid_key_separates_shape_and_contents():
    a = np.zeros((2, 3), np.uint8)
    assert grids.grid_key(a) == grids.grid_key(a.copy())
    assert grids.grid_key(a) != grids.grid_key(np.zeros((3, 2), np.uint8))
    b = a.copy()
    b[1, 2] = 4
    assert grids.grid_key(a) != grids.grid_key(b)
    assert grids.grid_key(grids.dihedral(a, 6)) == grids.grid_key(np.zeros((3, 2), np.uint8))
