"""ARC grids: the reference's token encoding, its 8 dihedral transforms, colour maps and names.

A grid is a 2-D ``np.uint8`` array of colours 0-9 with height and width in 1..30. In a dataset a
grid is one sequence of ``SEQ_LEN = 900`` tokens, the row-major 30x30 view (vocab 12):

======  ===========================================================
token   meaning
======  ===========================================================
0       PAD: outside the grid (labels with PAD are not scored)
1       EOS: the row just below the grid and the column just right
        of it, over the grid's extent (the corner cell stays PAD),
        where they fit inside 30x30
2..11   colour ``token - 2``
======  ===========================================================

**Dihedral ids** (the reference's ``dihedral_transform`` numbering, which the names in
identifiers.json carry): 0 identity, 1 ``np.rot90`` once (90° counter-clockwise), 2 twice,
3 three times, 4 flip left-right, 5 flip up-down, 6 transpose, 7 anti-transpose
(``fliplr(rot90(g))``). The inverse of 1 is 3 and of 3 is 1; every other id is its own inverse.

**Colour maps**: a length-10 uint8 permutation with ``colour_map[0] == 0`` (black stays);
``colour_map[c]`` is the new colour of colour ``c``.

**Smaller canvases**: :func:`encode` takes ``side`` (default 30) and :func:`decode` reads the
side from the row's length, so builds of small grids (``trm data build arc --side 6``) use
``side * side`` tokens with the same layout.

**Names**: an augmented task version is named ``f"{task_id}|||t{k}|||{digits}"`` where
``digits`` are the ten entries of the colour map; the original task is its plain id.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

PAD = 0
EOS = 1
COLOUR_OFFSET = 2
VOCAB_SIZE = 12
MAX_SIDE = 30
SEQ_LEN = MAX_SIDE * MAX_SIDE
SEPARATOR = "|||"
NUM_DIHEDRAL = 8
# DIHEDRAL_INVERSE[k] is the id of the transform that undoes transform k.
DIHEDRAL_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)
IDENTITY_MAP = np.arange(10, dtype=np.uint8)


def dihedral(grid: np.ndarray, k: int) -> np.ndarray:
    """The k-th dihedral transform of ``grid`` (ids as in the module docstring), contiguous."""
    if k == 0:
        out = grid
    elif k in (1, 2, 3):
        out = np.rot90(grid, k)
    elif k == 4:
        out = np.fliplr(grid)
    elif k == 5:
        out = np.flipud(grid)
    elif k == 6:
        out = grid.T
    elif k == 7:
        out = np.fliplr(np.rot90(grid, 1))
    else:
        raise ValueError(f"dihedral id {k!r} is not in 0..7")
    return np.ascontiguousarray(out)


def dihedral_batch(grids: np.ndarray, k: int) -> np.ndarray:
    """:func:`dihedral` applied to each grid of a ``[n, h, w]`` stack (a contiguous result)."""
    axes = (1, 2)
    if k == 0:
        out = grids
    elif k in (1, 2, 3):
        out = np.rot90(grids, k, axes=axes)
    elif k == 4:
        out = grids[:, :, ::-1]
    elif k == 5:
        out = grids[:, ::-1, :]
    elif k == 6:
        out = grids.transpose(0, 2, 1)
    elif k == 7:
        out = np.rot90(grids, 1, axes=axes)[:, :, ::-1]
    else:
        raise ValueError(f"dihedral id {k!r} is not in 0..7")
    return np.ascontiguousarray(out)


def transposes(k: int) -> bool:
    """Whether dihedral ``k`` swaps height and width (the odd rotations and the transposes)."""
    return k in (1, 3, 6, 7)


def inverse_dihedral(grid: np.ndarray, k: int) -> np.ndarray:
    """Undo :func:`dihedral`: ``inverse_dihedral(dihedral(g, k), k) == g``."""
    if k not in range(NUM_DIHEDRAL):
        raise ValueError(f"dihedral id {k!r} is not in 0..7")
    return dihedral(grid, DIHEDRAL_INVERSE[k])


def check_colour_map(colour_map: np.ndarray) -> np.ndarray:
    """``colour_map`` as uint8; ValueError unless it permutes 0..9 and keeps 0 at 0."""
    cmap = np.asarray(colour_map)
    if cmap.shape != (10,) or sorted(cmap.tolist()) != list(range(10)) or int(cmap[0]) != 0:
        raise ValueError(f"colour map {cmap.tolist()} is not a permutation of 0..9 keeping 0")
    return cmap.astype(np.uint8)


def augment(grid: np.ndarray, k: int, colour_map: np.ndarray) -> np.ndarray:
    """Recolour ``grid`` by ``colour_map``, then apply dihedral transform ``k``."""
    return dihedral(np.asarray(colour_map, dtype=np.uint8)[grid], k)


def unaugment(grid: np.ndarray, k: int, colour_map: np.ndarray) -> np.ndarray:
    """The inverse of :func:`augment`: ``unaugment(augment(g, k, m), k, m) == g``."""
    inverse_map = np.argsort(np.asarray(colour_map)).astype(np.uint8)
    return inverse_map[inverse_dihedral(grid, k)]


def augmented_name(task_id: str, k: int, colour_map: np.ndarray) -> str:
    """The identifier name of ``task_id`` under dihedral ``k`` and ``colour_map``."""
    digits = "".join(str(int(c)) for c in colour_map)
    return f"{task_id}{SEPARATOR}t{k}{SEPARATOR}{digits}"


def parse_name(name: str) -> tuple[str, int, np.ndarray]:
    """``(task_id, k, colour_map)`` of an identifier name; a plain id is (id, 0, identity).

    Raises ValueError when a name with separators is not ``id|||t<k>|||<10 digits>`` with k in
    0..7 and the digits a colour map (a permutation of 0..9 keeping 0).
    """
    if SEPARATOR not in name:
        return name, 0, IDENTITY_MAP.copy()
    parts = name.split(SEPARATOR)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"identifier name {name!r} is not 'task|||t<k>|||<colour map>'")
    task_id, transform, digits = parts
    if len(transform) != 2 or transform[0] != "t" or transform[1] not in "01234567":
        raise ValueError(f"identifier name {name!r}: transform {transform!r} is not t0..t7")
    if len(digits) != 10 or not digits.isdigit():
        raise ValueError(f"identifier name {name!r}: colour map {digits!r} is not 10 digits")
    colour_map = check_colour_map(np.array([int(d) for d in digits], dtype=np.uint8))
    return task_id, int(transform[1]), colour_map


def side_of(seq_len: int) -> int:
    """The canvas side of a ``seq_len``-token row (900 -> 30); ValueError unless a square."""
    side = math.isqrt(max(0, int(seq_len)))
    if side < 1 or side * side != seq_len or side > MAX_SIDE:
        raise ValueError(f"{seq_len} tokens are not a square canvas of side 1..30")
    return side


def encode(grid: np.ndarray, top: int = 0, left: int = 0, side: int = MAX_SIDE) -> np.ndarray:
    """The ``side * side`` tokens of ``grid`` placed at ``(top, left)`` of a PAD canvas, with EOS.

    Colours become ``colour + 2``. EOS fills row ``top + h`` over columns ``left .. left+w-1``
    and column ``left + w`` over rows ``top .. top+h-1`` when that row / column is inside the
    canvas (the reference's extent: the diagonal corner stays PAD). ``side`` is 30 (900 tokens)
    in the reference's encoding; a smaller canvas serves small-grid builds. ValueError when
    the grid does not fit at that offset.
    """
    grid = np.asarray(grid)
    if grid.ndim != 2:
        raise ValueError(f"a grid is 2-D; got shape {grid.shape}")
    h, w = grid.shape
    if h < 1 or w < 1 or top < 0 or left < 0 or top + h > side or left + w > side:
        raise ValueError(f"a {h}x{w} grid does not fit at ({top}, {left}) in {side}x{side}")
    canvas = np.zeros((side, side), dtype=np.uint8)
    canvas[top : top + h, left : left + w] = grid.astype(np.uint8) + COLOUR_OFFSET
    if top + h < side:
        canvas[top + h, left : left + w] = EOS
    if left + w < side:
        canvas[top : top + h, left + w] = EOS
    return canvas.reshape(side * side)


def decode(tokens: np.ndarray) -> np.ndarray | None:
    """The grid a token row holds at its top-left, or None when it holds none.

    The reference evaluator's crop on the square view of the row (30x30 for 900 tokens): going
    down the rows, the usable width is the run of colour tokens (2..11) from column 0, never
    wider than the rows above; the answer is the largest-area rectangle ``rows x width`` (the
    first when areas tie), shifted back to colours 0-9. None when the top-left token is not a
    colour. ValueError when the row's length is not a square of side 1..30.
    """
    flat = np.asarray(tokens).reshape(-1)
    side = side_of(flat.shape[0])
    view = flat.reshape(side, side)
    is_colour = (view >= COLOUR_OFFSET) & (view < COLOUR_OFFSET + 10)
    best_area, best_rows, best_cols = 0, 0, 0
    width = side
    for r in range(side):
        row = is_colour[r, :width]
        if not row.all():
            width = int(np.argmin(row))
        area = (r + 1) * width
        if area > best_area:
            best_area, best_rows, best_cols = area, r + 1, width
        if width == 0:
            break
    if best_area == 0:
        return None
    return (view[:best_rows, :best_cols] - COLOUR_OFFSET).astype(np.uint8)


def grid_key(grid: np.ndarray) -> bytes:
    """A SHA-256 digest of the grid's shape and uint8 contents (equal grids, equal keys)."""
    grid = np.ascontiguousarray(grid, dtype=np.uint8)
    if grid.ndim != 2 or max(grid.shape) > 255:
        raise ValueError(f"grid_key needs a 2-D grid with sides < 256; got shape {grid.shape}")
    digest = hashlib.sha256(bytes(grid.shape))
    digest.update(grid.tobytes())
    return digest.digest()
