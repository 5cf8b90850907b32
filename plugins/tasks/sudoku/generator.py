"""Generate unique-solution Sudoku puzzles: a random full grid, then clues removed at random.

A clue is removed only if the puzzle stays unique: since the current puzzle's only solution
has digit ``v`` at the cell, the cell can be blanked exactly when no solution exists with that
cell set to anything but ``v`` (one search with ``limit=1``). Removal stops once at most
``max_clues`` clues remain; with ``min_backtracks`` it goes on removing until the solver needs
that many guesses (see :mod:`.solver`). A grid that cannot get there is dropped for a new one.

Two options widen what "at most ``max_clues``" yields (by default every puzzle has exactly
``max_clues`` clues, since removal stops there): ``min_clues`` draws each puzzle's target
uniformly from ``min_clues .. max_clues``, and ``minimal`` is the probability that a puzzle is
carved until no clue can be removed (one pass over the cells in random order gives a minimal
puzzle: blanking more cells only adds solutions, so a clue kept once stays needed). A puzzle that
becomes minimal above its target is kept when it has at most ``max_clues`` clues.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from trm.data.generation import index_ranges, resolve_workers, run_jobs
from trm.errors import TrmError
from trm.plugins.tasks.sudoku.grid import box_shape
from trm.plugins.tasks.sudoku.solver import (
    Tables,
    masks_to_digits,
    search,
    solve,
    start_candidates,
    tables,
)

DEFAULT_MAX_ATTEMPTS = 200
# Below this many puzzles generate_many stays in-process: starting workers (~0.5 s) would cost
# more than the ~5 ms a 9x9 puzzle takes.
_PARALLEL_MIN_COUNT = 200


def random_full_grid(rnd: random.Random, size: int) -> np.ndarray:
    """A random complete grid ``(size, size)`` uint8: a search with shuffled candidate order."""
    t = tables(size)
    found: list[list[int]] = []
    search([t.full] * (size * size), [], t, 1, [0], found, rnd)
    return masks_to_digits(found[0], size)


def _stays_unique_without(cells: list[int], cell: int, t: Tables) -> bool:
    """Whether the unique puzzle ``cells`` keeps a unique solution with ``cell`` blanked."""
    digit = cells[cell]
    cells[cell] = 0
    started = start_candidates(cells, t)
    cells[cell] = digit
    if started is None:  # cannot happen for a solvable puzzle; be safe
        return False
    cand, queue = started
    bit = 1 << (digit - 1)
    if cand[cell] == bit:
        return True
    mask = cand[cell] & ~bit
    cand[cell] = mask
    if not mask & (mask - 1):
        queue.append(cell)
    return search(cand, queue, t, 1, [0], []) == 0


def _carve(
    rnd: random.Random,
    solution: np.ndarray,
    target_clues: int,
    min_backtracks: int,
    t: Tables,
    max_clues: int | None = None,
) -> tuple[np.ndarray | None, bool]:
    """Remove clues of ``solution`` in random order; return (puzzle or None, reached clues).

    Removal stops at ``target_clues`` (once the puzzle is hard enough); a pass that ends above
    it (the puzzle is minimal) still gives the puzzle when it has at most ``max_clues``
    (default ``target_clues``) and is hard enough.
    """
    if max_clues is None:
        max_clues = target_clues
    size = t.size
    cells = [int(d) for d in solution.ravel()]
    clues = len(cells)
    order = list(range(len(cells)))
    rnd.shuffle(order)

    def hard_enough() -> bool:
        if min_backtracks <= 0:
            return True
        grid = np.array(cells, dtype=np.uint8).reshape(size, size)
        return solve(grid, limit=2).backtracks >= min_backtracks

    if clues <= target_clues and hard_enough():
        return solution.copy(), True
    for cell in order:
        if _stays_unique_without(cells, cell, t):
            cells[cell] = 0
            clues -= 1
            if clues <= target_clues and hard_enough():
                return np.array(cells, dtype=np.uint8).reshape(size, size), True
    if clues <= max_clues and target_clues < max_clues and hard_enough():
        return np.array(cells, dtype=np.uint8).reshape(size, size), True
    return None, clues <= max_clues


def generate_puzzle(
    rng: np.random.Generator,
    size: int,
    max_clues: int,
    min_backtracks: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    min_clues: int = 0,
    minimal: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """One ``(question, solution)`` pair of ``(size, size)`` uint8 digit grids (0 = blank).

    The question has a unique solution, at most ``max_clues`` clues, and the solver needs at
    least ``min_backtracks`` guesses on it. With ``min_clues`` (0 = off) its target clue count
    is drawn uniformly from ``min_clues .. max_clues``; with probability ``minimal`` it is carved
    to a minimal puzzle (no clue removable). Without either, ``rng`` is drawn from exactly as
    before they existed, so earlier datasets rebuild bit for bit. Raises TrmError after
    ``max_attempts`` grids.
    """
    box_shape(size)
    if not 0 <= max_clues <= size * size:
        raise TrmError(f"max_clues must be between 0 and {size * size}, got {max_clues}")
    if min_clues > max_clues:
        raise TrmError(f"min_clues must be at most max_clues ({max_clues}), got {min_clues}")
    t = tables(size)
    rnd = random.Random(int(rng.integers(0, 2**63)))
    target = max_clues
    if min_clues:
        target = int(rng.integers(min_clues, max_clues + 1))
    if minimal and rng.random() < minimal:
        target = 0
    reached_clues = False
    for _ in range(max_attempts):
        solution = random_full_grid(rnd, size)
        question, reached = _carve(rnd, solution, target, min_backtracks, t, max_clues)
        reached_clues |= reached
        if question is not None:
            return question, solution
    if not reached_clues:
        raise TrmError(
            f"could not carve a {size}x{size} puzzle down to {max_clues} clues in "
            f"{max_attempts} attempts; raise clues (data.generate.clues)"
        )
    raise TrmError(
        f"could not reach {min_backtracks} solver backtracks with at most {max_clues} clues "
        f"in {max_attempts} attempts; lower min_backtracks (data.generate.min_backtracks)"
    )


def puzzle_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of puzzle ``index`` for ``seed``: independent of how work is split."""
    return np.random.default_rng(np.random.SeedSequence([seed % 2**63, index]))


def _generate_range(
    job: tuple[int, int, int, int, int, int, int, float],
) -> tuple[np.ndarray, np.ndarray]:
    size, max_clues, min_backtracks, seed, start, stop, min_clues, minimal = job
    pairs = [
        generate_puzzle(
            puzzle_rng(seed, i),
            size,
            max_clues,
            min_backtracks,
            min_clues=min_clues,
            minimal=minimal,
        )
        for i in range(start, stop)
    ]
    return _stack(pairs, size)


def _stack(pairs: list[tuple[np.ndarray, np.ndarray]], size: int) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        empty = np.zeros((0, size, size), dtype=np.uint8)
        return empty, empty.copy()
    return np.stack([q for q, _ in pairs]), np.stack([s for _, s in pairs])


def generate_many(
    count: int,
    size: int,
    max_clues: int,
    min_backtracks: int = 0,
    seed: int = 0,
    workers: int = 0,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
    min_clues: int = 0,
    minimal: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` puzzles as ``(questions, solutions)``, each ``(count, size, size)`` uint8.

    Puzzle ``i`` depends only on ``(seed, start + i)``, so the result is the same for any
    ``workers`` (0 = all cores). ``progress`` is called with the number done so far.
    ``min_clues`` and ``minimal`` are :func:`generate_puzzle`'s.
    """
    box_shape(size)
    workers = min(resolve_workers(workers), max(1, count))
    jobs_total = 1 if workers == 1 or count < _PARALLEL_MIN_COUNT else workers * 8
    jobs = [
        (size, max_clues, min_backtracks, seed, a, b, min_clues, minimal)
        for a, b in index_ranges(start, start + count, jobs_total)
    ]
    parts = run_jobs(_generate_range, jobs, workers, progress)
    if not parts:
        return _stack([], size)
    questions = np.concatenate([q for q, _ in parts])
    solutions = np.concatenate([s for _, s in parts])
    return questions, solutions
