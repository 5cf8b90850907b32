"""The task symmetries that answers are tried again under (``answer_symmetries``): each maps a
valid solution to a valid solution of the transformed puzzle, and back to the original —
every Sudoku family alone and composed, each of a maze's dihedral maps — and the draws are
reproducible from their seed."""

from __future__ import annotations

import numpy as np
import pytest

from trm.data.symmetry import CellSymmetry
from trm.plugins.tasks.maze import grid as maze_grid
from trm.plugins.tasks.maze.generator import MazeParams
from trm.plugins.tasks.maze.generator import generate_many as generate_mazes
from trm.plugins.tasks.maze.source import MazeSource
from trm.plugins.tasks.sudoku import grid as sudoku_grid
from trm.plugins.tasks.sudoku.generator import generate_many as generate_sudokus
from trm.plugins.tasks.sudoku.solver import solve
from trm.plugins.tasks.sudoku.source import SudokuSource
from trm.plugins.tasks.sudoku.symmetry import grid_symmetry

SUDOKU, MAZE = SudokuSource(), MazeSource()


def _puzzles(size: int, count: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    clues = {4: 6, 6: 14, 9: 30}[size]
    questions, solutions = generate_sudokus(count, size, clues, seed=11, workers=1)
    return [
        (sudoku_grid.encode(q).astype(np.int64), sudoku_grid.encode(s).astype(np.int64))
        for q, s in zip(questions, solutions, strict=True)
    ]


def _families(size: int, rng: np.random.Generator) -> dict[str, CellSymmetry]:
    """One map of each Sudoku family alone (the others the identity); never the identity
    (each draw is rolled by a nonzero shift)."""
    box_rows, box_cols = sudoku_grid.box_shape(size)
    lines = np.arange(size)
    digits = np.arange(1, size + 1)

    def shifted(count: int) -> np.ndarray:
        return np.roll(np.arange(count), int(rng.integers(1, count)))

    def within(per_group: int) -> np.ndarray:
        return np.concatenate(
            [g * per_group + shifted(per_group) for g in range(size // per_group)]
        )

    def groups(per_group: int) -> np.ndarray:
        return np.concatenate(
            [g * per_group + np.arange(per_group) for g in shifted(size // per_group)]
        )

    families = {
        "digit relabelling": grid_symmetry(size, lines, lines, shifted(size) + 1, False),
        "rows within bands": grid_symmetry(size, within(box_rows), lines, digits, False),
        "columns within stacks": grid_symmetry(size, lines, within(box_cols), digits, False),
        "band permutation": grid_symmetry(size, groups(box_rows), lines, digits, False),
        "stack permutation": grid_symmetry(size, lines, groups(box_cols), digits, False),
    }
    if box_rows == box_cols:
        families["transposition"] = grid_symmetry(size, lines, lines, digits, True)
    return families


def _assert_keeps_the_solution(question, solution, symmetry: CellSymmetry) -> None:
    image_q, image_s = symmetry.forward(question), symmetry.forward(solution)
    assert SUDOKU.check_answer(question, solution)
    assert SUDOKU.check_answer(image_q, image_s)  # a valid solution of the moved puzzle
    found = solve(sudoku_grid.decode(image_q), limit=2)
    assert found.count == 1  # still one solution: the image of the original's
    assert np.array_equal(sudoku_grid.encode(found.solution), image_s)
    assert np.array_equal(symmetry.inverse(image_q), question)
    assert np.array_equal(symmetry.inverse(image_s), solution)


@pytest.mark.parametrize("size", [4, 6, 9])
def test_each_sudoku_family_maps_a_solution_to_the_moved_puzzles_solution_and_back(size):
    rng = np.random.default_rng(size)
    for question, solution in _puzzles(size):
        for name, symmetry in _families(size, rng).items():
            assert not symmetry.is_identity(), name
            _assert_keeps_the_solution(question, solution, symmetry)


@pytest.mark.parametrize("size", [4, 6, 9])
def test_composed_and_drawn_sudoku_maps_keep_the_solution_and_invert(size):
    rng = np.random.default_rng(100 + size)
    families = list(_families(size, rng).values())
    composed = families[0]
    for symmetry in families[1:]:
        composed = composed.then(symmetry)
    drawn = SUDOKU.answer_symmetries(size * size, 6, np.random.default_rng(5))
    for question, solution in _puzzles(size):
        step_by_step_q, step_by_step_s = question, solution
        for symmetry in families:
            step_by_step_q = symmetry.forward(step_by_step_q)
            step_by_step_s = symmetry.forward(step_by_step_s)
        assert np.array_equal(composed.forward(question), step_by_step_q)
        assert np.array_equal(composed.forward(solution), step_by_step_s)
        for symmetry in [composed, *drawn, drawn[0].then(drawn[1])]:
            _assert_keeps_the_solution(question, solution, symmetry)


def test_sudoku_draws_are_reproducible_from_their_seed_and_never_the_identity():
    def draws(seed: int) -> list[tuple[list[int], list[int]]]:
        drawn = SUDOKU.answer_symmetries(81, 7, np.random.default_rng(seed))
        return [(s.positions.tolist(), s.tokens.tolist()) for s in drawn]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)
    assert len(draws(3)) == 7
    four = SUDOKU.answer_symmetries(16, 50, np.random.default_rng(0))  # 4x4: identity is likely
    assert not any(s.is_identity() for s in four)
    token_maps = {tuple(s.tokens[:2].tolist()) for s in four}
    assert token_maps == {(0, 1)}  # pad and blank keep their tokens


def _mazes() -> tuple[np.ndarray, np.ndarray]:
    params = MazeParams(size=8, min_walls=10, max_walls=20, min_path=6)
    return generate_mazes(4, params, seed=2, workers=1)


@pytest.mark.parametrize("which", range(1, 8))
def test_each_dihedral_map_takes_a_shortest_path_to_one_of_the_moved_maze_and_back(which):
    symmetry = maze_grid.dihedral_symmetry(8, which)
    for question, label in zip(*_mazes(), strict=True):
        assert MAZE.check_answer(question, label)
        image_q, image_a = symmetry.forward(question), symmetry.forward(label)
        assert np.array_equal(image_q, maze_grid.dihedral(question.reshape(8, 8), which).ravel())
        assert maze_grid.path_quality(image_q, image_a) == (True, True)
        assert MAZE.check_answer(image_q, image_a)
        assert np.array_equal(symmetry.inverse(image_q), question)
        assert np.array_equal(symmetry.inverse(image_a), label)


def test_maze_draws_are_the_seven_other_maps_in_a_seeded_order():
    def order(seed: int, count: int) -> list[list[int]]:
        drawn = MAZE.answer_symmetries(64, count, np.random.default_rng(seed))
        return [s.positions.tolist() for s in drawn]

    seven = order(1, 7)
    identity = list(range(64))
    assert identity not in seven and len({tuple(p) for p in seven}) == 7
    assert order(1, 7) == seven and order(1, 9)[7:] == seven[:2]
    assert any(order(seed, 7) != seven for seed in range(2, 6))


def test_a_map_that_is_not_a_permutation_is_refused():
    with pytest.raises(ValueError, match="positions is not a permutation"):
        CellSymmetry(positions=[0, 0, 1], tokens=[0, 1])
    with pytest.raises(ValueError, match="tokens is not a permutation"):
        CellSymmetry(positions=[0, 1], tokens=[1, 1])
