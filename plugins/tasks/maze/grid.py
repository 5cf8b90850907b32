"""Maze grids: the reference token encoding, text parsing and rendering, paths and their checks.

A maze is an ``(size, size)`` uint8 array of tokens, stored row-major as ``size * size`` tokens
(``seq_len``). The tokens are the reference's (vocab 6):

======  =====  ===========================================
token   char   meaning
======  =====  ===========================================
0       (pad)  padding; never in a built maze
1       ``#``  wall
2       `` ``  open cell
3       ``S``  start
4       ``G``  goal
5       ``o``  a cell of the S–G path (labels only)
======  =====  ===========================================

The question holds exactly one ``S`` and one ``G``; its label is the same grid with ``o`` on the
cells strictly between S and G of one shortest path (S and G keep their tokens). Moves go to the
4-neighbourhood (up, right, down, left) through non-wall cells; a path's *length* is its number of
steps, so a label of length ``d`` has ``d - 1`` ``o`` cells.

**The label's tie-break** (shortest paths are rarely unique): breadth-first search from G gives
each reachable cell its distance to G; the path starts at S and repeatedly steps to the first
neighbour, in the fixed order **up, right, down, left**, whose distance is one less than the
current cell's, until it reaches G. The label is therefore a function of the question alone.

**A valid path** (:func:`path_quality`): take the cells marked ``o`` (whatever else an answer
holds is ignored) plus S and G. It is valid when every ``o`` cell is open in the question (not a
wall or padding) and these cells form a simple path from S to G in the grid graph they induce:
connected, S and G with exactly one neighbour among them, every ``o`` cell with exactly two
(with no ``o`` cell, S and G must be adjacent). Every shortest path is such a path. It is
*optimal* when it is valid and its length equals the breadth-first shortest distance.

Breadth-first search runs on Python integers used as bit sets: cell ``(r, c)`` is bit
``r * (size + 1) + c``; the spare column ``size`` is never open, so shifting by ±1 cannot wrap
a row into the next.
"""

from __future__ import annotations

import math

import numpy as np

from trm.data.symmetry import CellSymmetry
from trm.errors import TrmError

PAD, WALL, OPEN, START, GOAL, PATH = range(6)
VOCAB_SIZE = 6
PAD_TOKEN = PAD
IGNORE_LABEL_ID = 0
# The character of each token (PAD has none: rendered as '.').
CHARS = {WALL: "#", OPEN: " ", START: "S", GOAL: "G", PATH: "o"}
_TOKEN_OF = {ch: token for token, ch in CHARS.items()}
_CHAR_TABLE = np.zeros(256, dtype=np.uint8)  # ord(char) -> token; 0 for anything else
for _token, _char in CHARS.items():
    _CHAR_TABLE[ord(_char)] = _token
_RENDER = np.array([".", "#", " ", "S", "G", "o"])
LEGEND = "'#' wall, ' ' open, 'S' start, 'G' goal, 'o' path"
# Direction order of the tie-break: up, right, down, left as (row, column) steps.
DIRECTIONS = ((-1, 0), (0, 1), (1, 0), (0, -1))


def seq_len(size: int) -> int:
    return size * size


def size_from_seq_len(length: int) -> int:
    """The side of a square maze of ``length`` cells; TrmError when it is not a square."""
    size = math.isqrt(max(0, int(length)))
    if size < 2 or size * size != length:
        raise TrmError(f"seq_len {length} is not a square maze (size x size cells, size >= 2)")
    return size


def chars_to_tokens(text: str | bytes) -> np.ndarray:
    """uint8 tokens of a string of maze characters; any other character becomes 0 (PAD)."""
    data = text.encode("latin-1", "replace") if isinstance(text, str) else bytes(text)
    return _CHAR_TABLE[np.frombuffer(data, dtype=np.uint8)]


def tokens_to_chars(tokens: np.ndarray) -> str:
    """The characters of a token row; PAD is ``.``, an unknown token ``?``."""
    flat = np.asarray(tokens).astype(np.int64).ravel()
    chars = np.full(flat.shape, "?", dtype="<U1")
    known = (flat >= 0) & (flat < VOCAB_SIZE)
    chars[known] = _RENDER[flat[known]]
    return "".join(chars.tolist())


def render(tokens: np.ndarray) -> str:
    """One text line per maze row (see :func:`tokens_to_chars` for the characters)."""
    flat = np.asarray(tokens).ravel()
    size = size_from_seq_len(flat.size)
    text = tokens_to_chars(flat)
    return "\n".join(text[row * size : (row + 1) * size] for row in range(size))


def parse_text(text: str, size: int) -> np.ndarray:
    """uint8 tokens ``(size * size,)`` of a maze given as one string or as lines of text.

    Line breaks are ignored; every other character is a cell (a space is an open cell). When the
    text has ``size`` lines and some are shorter than ``size`` (an editor dropped trailing
    spaces), they are padded with open cells. ``o`` cells are read as open, so a solved maze
    may be given. Raises TrmError for a wrong cell count, a character that is not a cell, or
    not exactly one S and one G.
    """
    cells = size * size
    joined = text.replace("\r", "").replace("\n", "")
    if len(joined) != cells:
        lines = text.replace("\r", "").split("\n")
        while lines and lines[-1] == "":
            lines.pop()
        if len(lines) == size and all(len(line) <= size for line in lines):
            joined = "".join(line.ljust(size) for line in lines)
    if len(joined) != cells:
        raise TrmError(
            f"maze has {len(joined)} cells after removing line breaks; expected {cells} "
            f"(a {size}x{size} maze: {LEGEND})"
        )
    tokens = chars_to_tokens(joined)
    bad = np.flatnonzero(tokens == PAD)
    if bad.size:
        at = int(bad[0])
        raise TrmError(
            f"maze has {joined[at]!r} at row {at // size + 1}, column {at % size + 1}; use {LEGEND}"
        )
    problem = endpoint_problem(tokens)
    if problem:
        raise TrmError(f"maze {problem}")
    tokens[tokens == PATH] = OPEN
    return tokens


def endpoint_problem(tokens: np.ndarray) -> str | None:
    """``"has no S (start)"``-style text unless the row holds exactly one S and one G."""
    flat = np.asarray(tokens).ravel()
    for token, name in ((START, "S (start)"), (GOAL, "G (goal)")):
        count = int(np.count_nonzero(flat == token))
        if count != 1:
            return f"has {'no' if count == 0 else count} {name}" + (
                "" if count == 0 else " cells; expected exactly one"
            )
    return None


# --- bit sets ---------------------------------------------------------------------------------


def bits(mask: np.ndarray) -> int:
    """The bit set of a boolean ``(size, size)`` mask (bit ``r * (size + 1) + c``)."""
    mask = np.asarray(mask, dtype=bool)
    size = mask.shape[0]
    padded = np.zeros((size, size + 1), dtype=bool)
    padded[:, :size] = mask
    return int.from_bytes(np.packbits(padded.ravel(), bitorder="little").tobytes(), "little")


def bit_of(index: int, size: int) -> int:
    """The bit of flat cell ``index`` (row-major over ``size x size``)."""
    return 1 << (index // size * (size + 1) + index % size)


def bit_cells(value: int, size: int) -> list[int]:
    """Flat cell indices (row-major over ``size x size``) of the bits set in ``value``."""
    width = size + 1
    out = []
    while value:
        low = value & -value
        position = low.bit_length() - 1
        out.append(position // width * size + position % width)
        value ^= low
    return out


def neighbours(frontier: int, width: int) -> int:
    """Every cell next to a cell of ``frontier`` (unmasked: may include walls)."""
    return (frontier << 1) | (frontier >> 1) | (frontier << width) | (frontier >> width)


def bfs_layers(passable: int, source: int, width: int) -> list[int]:
    """Breadth-first layers from the bit ``source`` through ``passable``: layer d = distance d."""
    layers = [source]
    seen = source
    frontier = source
    while True:
        frontier = neighbours(frontier, width) & passable & ~seen
        if not frontier:
            return layers
        seen |= frontier
        layers.append(frontier)


def passable_bits(tokens: np.ndarray) -> int:
    """The bit set of the cells a path may use: open, S, G (and ``o``)."""
    grid = _square(tokens)
    return bits((grid >= OPEN) & (grid <= PATH))


def shortest_distance(tokens: np.ndarray) -> int | None:
    """Steps of a shortest S–G path in the question ``tokens``; None when they are apart."""
    grid = _square(tokens)
    if endpoint_problem(grid) is not None:
        return None
    size = grid.shape[0]
    start = bits(grid == START)
    goal = bits(grid == GOAL)
    layers = bfs_layers(passable_bits(grid), goal, size + 1)
    for distance, layer in enumerate(layers):
        if layer & start:
            return distance
    return None


def shortest_path(tokens: np.ndarray) -> list[int] | None:
    """Flat cell indices of the tie-break's shortest path, S first and G last; None if none."""
    grid = _square(tokens)
    if endpoint_problem(grid) is not None:
        return None
    size = grid.shape[0]
    width = size + 1
    flat = grid.ravel()
    start_index = int(np.flatnonzero(flat == START)[0])
    goal_bit = bits(grid == GOAL)
    layers = bfs_layers(passable_bits(grid), goal_bit, width)
    row, col = divmod(start_index, size)
    distance = next((d for d, layer in enumerate(layers) if layer >> (row * width + col) & 1), None)
    if distance is None:
        return None
    path = [start_index]
    while distance > 0:
        distance -= 1
        layer = layers[distance]
        for dr, dc in DIRECTIONS:
            r, c = row + dr, col + dc
            if 0 <= r < size and 0 <= c < size and layer >> (r * width + c) & 1:
                row, col = r, c
                break
        path.append(row * size + col)
    return path


def label_of(question: np.ndarray) -> np.ndarray:
    """The label of a question row: ``o`` on the tie-break path's inner cells (TrmError if none)."""
    question = np.asarray(question, dtype=np.uint8).ravel()
    path = shortest_path(question)
    if path is None:
        raise TrmError("the maze's S and G are not connected")
    label = question.copy()
    label[path[1:-1]] = PATH
    return label


def path_quality(question: np.ndarray, answer: np.ndarray) -> tuple[bool, bool]:
    """``(valid, optimal)`` of the ``o`` cells of ``answer`` as an S–G path of ``question``.

    See the module docstring for the definitions. A question without exactly one S and one G,
    or an answer of another length, gives ``(False, False)``.
    """
    q = np.asarray(question).ravel()
    a = np.asarray(answer).ravel()
    if a.shape != q.shape:
        return False, False
    try:
        grid = _square(q)
    except TrmError:
        return False, False
    if endpoint_problem(grid) is not None:
        return False, False
    marked = a.reshape(grid.shape) == PATH
    if (marked & ~((grid >= OPEN) & (grid <= PATH))).any():
        return False, False
    size = grid.shape[0]
    width = size + 1
    start, goal = bits(grid == START), bits(grid == GOAL)
    cells = bits(marked) | start | goal
    length = cells.bit_count() - 1
    if not _is_simple_path(cells, start, goal, width):
        return False, False
    return True, shortest_distance(grid) == length


def _is_simple_path(cells: int, start: int, goal: int, width: int) -> bool:
    """Whether ``cells`` induce a simple path from ``start`` to ``goal`` (degrees 1, 2…2, 1)."""
    if start == goal:
        return False
    # Walk the path: each step must have exactly one unvisited neighbour among the cells, and
    # no cell may touch a visited cell other than its predecessor (no chord).
    previous, current, visited = 0, start, start
    while current != goal:
        around = neighbours(current, width) & cells
        if (around & ~previous & visited) or (around & ~visited).bit_count() != 1:
            return False
        previous, current = current, around & ~visited
        visited |= current
    around = neighbours(goal, width) & cells
    return around == previous and visited == cells


def _square(tokens: np.ndarray) -> np.ndarray:
    flat = np.asarray(tokens).ravel()
    size = size_from_seq_len(flat.size)
    return flat.reshape(size, size)


# --- dihedral transforms ------------------------------------------------------------------------


def dihedral(grid: np.ndarray, which: int) -> np.ndarray:
    """Transform ``which`` (0-7) of a square grid (or a batch ``(..., n, n)``).

    0 identity, 1-3 rotations by 90, 180 and 270 degrees (counter-clockwise), 4 left-right
    mirror, 5 up-down mirror, 6 transpose, 7 anti-transpose.
    """
    grid = np.asarray(grid)
    if which < 4:
        return np.rot90(grid, which, axes=(-2, -1))
    if which == 4:
        return grid[..., :, ::-1]
    if which == 5:
        return grid[..., ::-1, :]
    if which == 6:
        return np.swapaxes(grid, -1, -2)
    return np.rot90(np.swapaxes(grid, -1, -2), 2, axes=(-2, -1))


def dihedral_symmetry(size: int, which: int) -> CellSymmetry:
    """Transform ``which`` (1-7, as :func:`dihedral` numbers them) of ``size x size`` token
    rows as a cell map; tokens keep their meaning (S stays the start, G the goal)."""
    cells = np.arange(size * size).reshape(size, size)
    return CellSymmetry(positions=dihedral(cells, which).ravel(), tokens=np.arange(VOCAB_SIZE))


def dihedral_symmetries(size: int, count: int, rng: np.random.Generator) -> list[CellSymmetry]:
    """``count`` of the seven dihedral maps other than the identity: the seven in an order
    drawn with ``rng``, repeated from the start when ``count`` is more than seven. A path's
    validity and length do not change under them (moves are to the four neighbours), so a
    valid shortest path maps to one of the image."""
    order = rng.permutation(np.arange(1, 8))
    return [dihedral_symmetry(size, int(order[i % 7])) for i in range(count)]


def canonical_key(row: np.ndarray, size: int) -> bytes:
    """The smallest of the 8 dihedral versions' bytes: equal for mazes that are copies."""
    grid = np.asarray(row, dtype=np.uint8).reshape(size, size)
    return min(np.ascontiguousarray(dihedral(grid, t)).tobytes() for t in range(8))
