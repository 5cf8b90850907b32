"""Generate random-wall mazes whose shortest S–G path is at least ``min_path`` steps long.

Maze ``i`` of a stream ``seed`` draws everything from its own generator
(:func:`maze_rng`), so a batch is the same for any number of worker processes. For each maze,
wall layouts are drawn until one qualifies (at most ``max_layouts``):

1. a wall count uniform in ``[min_walls, max_walls]``, and that many distinct wall cells
   uniform over the grid (no border is added);
2. the largest connected component of open cells (4-neighbourhood; the first found on a tie);
3. a cell ``R`` uniform in that component and a breadth-first sweep from it. If some cells are
   at least ``min_path`` steps from ``R``, then S = R and G is uniform among them. Otherwise
   (the usual case for long paths, where naive sampling rarely qualifies) the double sweep: A
   uniform among the cells farthest from R, B uniform among the cells farthest from A; A, B
   (in random order) become S, G when they are at least ``min_path`` steps apart, else the
   layout is dropped.

The label's path is then :func:`trm.plugins.tasks.maze.grid.label_of`'s (the documented tie-break).
For 30x30 mazes with 270-450 walls and ``min_path`` 111 this takes about 0.04 s per maze.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from attrs import frozen

from trm.data.generation import index_ranges, resolve_workers, run_jobs
from trm.errors import TrmError
from trm.plugins.tasks.maze import grid

# Wall layouts tried for one maze before giving up.
DEFAULT_MAX_LAYOUTS = 20_000
# generate_many makes this many mazes in-process first and times them; it starts worker
# processes for the rest only when they would take longer than _PARALLEL_MIN_SECONDS in-process
# (starting workers costs about 1 s).
_PROBE_COUNT = 16
_PARALLEL_MIN_SECONDS = 2.0


@frozen
class MazeParams:
    """What a generated maze must satisfy (the build options with the preset resolved)."""

    size: int
    min_walls: int
    max_walls: int
    min_path: int


def maze_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of maze ``index`` for ``seed``: independent of how work is split."""
    return np.random.default_rng(np.random.SeedSequence([seed % 2**63, index]))


def _mask_of(value: int, size: int) -> np.ndarray:
    """The flat ``(size * size,)`` boolean mask of a bit set (inverse of :func:`grid.bits`)."""
    width = size + 1
    nbytes = (size * width + 7) // 8
    raw = np.frombuffer(value.to_bytes(nbytes, "little"), dtype=np.uint8)
    unpacked = np.unpackbits(raw, bitorder="little")[: size * width]
    return unpacked.reshape(size, width)[:, :size].ravel().astype(bool)


def _pick(rng: np.random.Generator, value: int, size: int) -> int:
    """A flat cell index uniform among the bits of ``value`` (non-empty)."""
    cells = np.flatnonzero(_mask_of(value, size))
    return int(cells[rng.integers(cells.size)])


def _flood(passable: int, seed: int, width: int) -> int:
    """The connected component of ``passable`` holding the bit ``seed``."""
    seen = frontier = seed
    while frontier:
        frontier = grid.neighbours(frontier, width) & passable & ~seen
        seen |= frontier
    return seen


def _largest_component(open_bits: int, width: int) -> int:
    best, best_count, left = 0, 0, open_bits
    while left and left.bit_count() > best_count:
        low = left & -left
        component = _flood(open_bits, low, width)
        left &= ~component
        count = component.bit_count()
        if count > best_count:
            best, best_count = component, count
    return best


def _endpoints(rng: np.random.Generator, p: MazeParams, open_bits: int) -> tuple[int, int] | None:
    """Flat indices ``(S, G)`` for one wall layout, or None when it does not qualify."""
    size, width = p.size, p.size + 1
    component = _largest_component(open_bits, width)
    if component.bit_count() < 2 or component.bit_count() <= p.min_path:
        return None
    root = _pick(rng, component, size)
    layers = grid.bfs_layers(component, grid.bit_of(root, size), width)
    if len(layers) > p.min_path:
        far = 0
        for layer in layers[p.min_path :]:
            far |= layer
        return root, _pick(rng, far, size)
    a = _pick(rng, layers[-1], size)
    layers = grid.bfs_layers(component, grid.bit_of(a, size), width)
    if len(layers) <= p.min_path:
        return None
    b = _pick(rng, layers[-1], size)
    return (a, b) if rng.random() < 0.5 else (b, a)


def generate_maze(
    rng: np.random.Generator, p: MazeParams, max_layouts: int = DEFAULT_MAX_LAYOUTS
) -> tuple[np.ndarray, np.ndarray]:
    """One ``(question, label)`` pair of uint8 token rows ``(size * size,)``.

    Raises TrmError when ``max_layouts`` wall layouts give no S–G pair ``min_path`` apart.
    """
    cells = p.size * p.size
    for _ in range(max_layouts):
        walls = int(rng.integers(p.min_walls, p.max_walls + 1))
        question = np.full(cells, grid.OPEN, dtype=np.uint8)
        question[rng.choice(cells, size=walls, replace=False)] = grid.WALL
        ends = _endpoints(rng, p, grid.bits((question == grid.OPEN).reshape(p.size, p.size)))
        if ends is None:
            continue
        question[ends[0]] = grid.START
        question[ends[1]] = grid.GOAL
        return question, grid.label_of(question)
    raise TrmError(
        f"no {p.size}x{p.size} layout with {p.min_walls}-{p.max_walls} walls gave a shortest "
        f"path of {p.min_path} steps or more in {max_layouts} tries; lower "
        "data.generate.min_path or data.generate.max_walls"
    )


def _generate_range(job: tuple[MazeParams, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    p, seed, start, stop = job
    pairs = [generate_maze(maze_rng(seed, i), p) for i in range(start, stop)]
    return _stack(pairs, p.size)


def _stack(pairs: list[tuple[np.ndarray, np.ndarray]], size: int) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        empty = np.zeros((0, size * size), dtype=np.uint8)
        return empty, empty.copy()
    return np.stack([q for q, _ in pairs]), np.stack([a for _, a in pairs])


def generate_many(
    count: int,
    p: MazeParams,
    seed: int = 0,
    workers: int = 0,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` mazes as ``(questions, labels)``, each ``(count, size * size)`` uint8 tokens.

    Maze ``i`` depends only on ``(p, seed, start + i)``, so the result is the same for any
    ``workers`` (0 = all cores): the first mazes are made in-process and timed, and worker
    processes make the rest only when that saves time. ``progress`` is called with the number
    done so far.
    """
    workers = min(resolve_workers(workers), max(1, count))
    probe = min(count, _PROBE_COUNT)
    started = time.perf_counter()
    parts = [_generate_range((p, seed, start, start + probe))]
    per_maze = (time.perf_counter() - started) / max(1, probe)
    done = probe
    if progress is not None and probe:
        progress(done)
    rest = count - probe
    parallel = workers > 1 and rest * per_maze > _PARALLEL_MIN_SECONDS
    ranges = index_ranges(start + probe, start + count, workers * 8 if parallel else 1)
    jobs = [(p, seed, a, b) for a, b in ranges]
    parts += run_jobs(_generate_range, jobs, workers, progress, done)
    questions = np.concatenate([q for q, _ in parts])
    labels = np.concatenate([a for _, a in parts])
    return questions, labels
