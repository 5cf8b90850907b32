"""A fast pure-Python Sudoku solver that counts solutions and measures hardness.

Cells hold bitmasks of candidate digits (bit ``d - 1`` for digit ``d``). Each search node
propagates naked singles (a cell with one candidate removes it from its peers) and hidden
singles (a digit with one place in a row, column or box goes there), then branches on the
unfilled cell with the fewest candidates, trying candidates in ascending order. ``backtracks``
counts guesses — values tried at a cell with two or more candidates — over the whole search, so
0 means singles alone solve the puzzle; with ``limit=2`` on a unique puzzle it is the work to
solve it and prove uniqueness, a deterministic hardness measure.
"""

from __future__ import annotations

import functools
import random

import numpy as np
from attrs import frozen

from trm.plugins.tasks.sudoku.grid import box_shape


@frozen(eq=False)
class SolveResult:
    """Outcome of :func:`solve`: solutions found (at most ``limit``), the first, the guesses."""

    count: int
    solution: np.ndarray | None
    backtracks: int


@frozen(eq=False)
class Tables:
    """Per-size lookup tables: units (rows, columns, boxes) and the peers of each cell."""

    size: int
    full: int
    units: tuple[tuple[int, ...], ...]
    peers: tuple[tuple[int, ...], ...]
    cell_units: tuple[tuple[int, int, int], ...]
    popcount: tuple[int, ...]


@functools.cache
def tables(size: int) -> Tables:
    """Lookup tables for a supported size (cached)."""
    box_rows, box_cols = box_shape(size)
    cells = range(size * size)
    rows = [tuple(r * size + c for c in range(size)) for r in range(size)]
    cols = [tuple(r * size + c for r in range(size)) for c in range(size)]
    boxes: list[list[int]] = [[] for _ in range(size)]
    for cell in cells:
        r, c = divmod(cell, size)
        boxes[(r // box_rows) * (size // box_cols) + c // box_cols].append(cell)
    units = tuple(rows + cols + [tuple(b) for b in boxes])
    cell_units = []
    for cell in cells:
        r, c = divmod(cell, size)
        b = (r // box_rows) * (size // box_cols) + c // box_cols
        cell_units.append((r, size + c, 2 * size + b))
    peers = tuple(
        tuple(sorted({p for u in cell_units[cell] for p in units[u]} - {cell})) for cell in cells
    )
    popcount = tuple(bin(m).count("1") for m in range(1 << size))
    return Tables(
        size=size,
        full=(1 << size) - 1,
        units=units,
        peers=peers,
        cell_units=tuple(cell_units),
        popcount=popcount,
    )


def start_candidates(cells: list[int], t: Tables) -> tuple[list[int], list[int]] | None:
    """Candidate masks for flat digits ``cells`` and the queue of forced cells to propagate.

    None when two clues clash or a blank cell has no candidate.
    """
    size = t.size
    used = [0] * (3 * size)
    cell_units = t.cell_units
    for cell, digit in enumerate(cells):
        if digit:
            bit = 1 << (digit - 1)
            r, c, b = cell_units[cell]
            if (used[r] | used[c] | used[b]) & bit:
                return None
            used[r] |= bit
            used[c] |= bit
            used[b] |= bit
    full = t.full
    cand = []
    queue = []
    for cell, digit in enumerate(cells):
        if digit:
            cand.append(1 << (digit - 1))
            continue
        r, c, b = cell_units[cell]
        mask = full & ~(used[r] | used[c] | used[b])
        if not mask:
            return None
        if not mask & (mask - 1):
            queue.append(cell)
        cand.append(mask)
    return cand, queue


def propagate(cand: list[int], queue: list[int], t: Tables) -> bool:
    """Apply naked and hidden singles in place until none is left; False on a contradiction.

    ``queue`` holds single-candidate cells whose digit is not yet removed from their peers.
    """
    peers = t.peers
    units = t.units
    full = t.full
    while True:
        while queue:
            cell = queue.pop()
            bit = cand[cell]
            for peer in peers[cell]:
                mask = cand[peer]
                if mask & bit:
                    mask ^= bit
                    if not mask:
                        return False
                    cand[peer] = mask
                    if not mask & (mask - 1):
                        queue.append(peer)
        for unit in units:
            once = twice = 0
            for cell in unit:
                mask = cand[cell]
                twice |= once & mask
                once |= mask
            if once != full:
                return False
            hidden = once & ~twice
            if hidden:
                for cell in unit:
                    mask = cand[cell]
                    only = mask & hidden
                    if only and only != mask:
                        if only & (only - 1):
                            return False
                        cand[cell] = only
                        queue.append(cell)
        if not queue:
            return True


def search(
    cand: list[int],
    queue: list[int],
    t: Tables,
    limit: int,
    stats: list[int],
    found: list[list[int]],
    rng: random.Random | None = None,
) -> int:
    """Count solutions below this node, stopping at ``limit``.

    ``stats[0]`` accumulates guesses; the first solution (candidate masks) is appended to
    ``found``. ``rng`` shuffles the order in which a cell's candidates are tried.
    """
    if not propagate(cand, queue, t):
        return 0
    popcount = t.popcount
    best = -1
    best_count = t.size + 1
    for cell, mask in enumerate(cand):
        if mask & (mask - 1):
            count = popcount[mask]
            if count < best_count:
                best = cell
                best_count = count
                if count == 2:
                    break
    if best < 0:
        if not found:
            found.append(cand)
        return 1
    mask = cand[best]
    bits = []
    while mask:
        bit = mask & -mask
        bits.append(bit)
        mask ^= bit
    if rng is not None:
        rng.shuffle(bits)
    total = 0
    for bit in bits:
        stats[0] += 1
        child = cand.copy()
        child[best] = bit
        total += search(child, [best], t, limit - total, stats, found, rng)
        if total >= limit:
            break
    return total


def masks_to_digits(cand: list[int], size: int) -> np.ndarray:
    """A solved candidate list as a digit grid ``(size, size)`` uint8."""
    return np.array([m.bit_length() for m in cand], dtype=np.uint8).reshape(size, size)


def solve(grid: np.ndarray, limit: int = 2) -> SolveResult:
    """Count the solutions of a digit grid (0 = blank) up to ``limit``; report guesses.

    ``count == 1`` with ``limit >= 2`` means the solution is unique.
    """
    grid = np.asarray(grid)
    size = round(grid.size**0.5)
    t = tables(size)
    started = start_candidates([int(d) for d in grid.ravel()], t)
    if started is None:
        return SolveResult(count=0, solution=None, backtracks=0)
    cand, queue = started
    stats = [0]
    found: list[list[int]] = []
    count = search(cand, queue, t, limit, stats, found)
    solution = masks_to_digits(found[0], size) if found else None
    return SolveResult(count=count, solution=solution, backtracks=stats[0])


def count_solutions(grid: np.ndarray, limit: int = 2) -> int:
    """Number of solutions of a digit grid, counted up to ``limit``."""
    return solve(grid, limit).count


def has_unique_solution(grid: np.ndarray) -> bool:
    return solve(grid, limit=2).count == 1


def is_valid_solution(question: np.ndarray, answer: np.ndarray) -> bool:
    """True when ``answer`` (digits) fills every cell, keeps the clues of ``question`` and
    holds each digit once per row, column and box."""
    question = np.asarray(question)
    answer = np.asarray(answer)
    if answer.shape != question.shape or answer.ndim != 2 or answer.shape[0] != answer.shape[1]:
        return False
    size = answer.shape[0]
    if size not in (4, 6, 9):
        return False
    values = answer.astype(np.int64)
    if values.min() < 1 or values.max() > size:
        return False
    clues = question > 0
    if not np.array_equal(values[clues], question[clues].astype(np.int64)):
        return False
    box_rows, box_cols = box_shape(size)
    bits = np.left_shift(1, values - 1)
    boxes = (
        bits.reshape(size // box_rows, box_rows, size // box_cols, box_cols)
        .transpose(0, 2, 1, 3)
        .reshape(size, size)
    )
    full = (1 << size) - 1
    return bool(
        (np.bitwise_or.reduce(bits, axis=1) == full).all()
        and (np.bitwise_or.reduce(bits, axis=0) == full).all()
        and (np.bitwise_or.reduce(boxes, axis=1) == full).all()
    )
