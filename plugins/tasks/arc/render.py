"""ARC grids as pictures: coloured cells in the terminal (rich) and a PNG file.

Colours are the ARC web viewer's palette (0 black, 1 blue, 2 red, 3 green, 4 yellow, 5 grey,
6 magenta, 7 orange, 8 sky, 9 maroon). In the terminal each cell is its digit on its colour,
so a grid stays readable where colours are off (a pipe, a file). The PNG is written with the
standard library alone (zlib): a row of panels per test input — the input, attempt 1,
attempt 2 and, when known, the solution — each attempt framed green when right, red when
wrong, grey when the solution is not known.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rich.text import Text

PALETTE = np.array(
    [
        (0x00, 0x00, 0x00),
        (0x00, 0x74, 0xD9),
        (0xFF, 0x41, 0x36),
        (0x2E, 0xCC, 0x40),
        (0xFF, 0xDC, 0x00),
        (0xAA, 0xAA, 0xAA),
        (0xF0, 0x12, 0xBE),
        (0xFF, 0x85, 0x1B),
        (0x7F, 0xDB, 0xFF),
        (0x87, 0x0C, 0x25),
    ],
    dtype=np.uint8,
)
# Digits drawn dark on these light colours, light on the others.
_LIGHT = {3, 4, 5, 7, 8}
WHITE = (0xFF, 0xFF, 0xFF)
GRID_LINE = (0x55, 0x55, 0x55)
RIGHT = (0x2E, 0xCC, 0x40)
WRONG = (0xFF, 0x41, 0x36)
UNKNOWN = (0xAA, 0xAA, 0xAA)
FRAME_PX = 4
GAP_PX = 16
# The side of the largest grid in pixels is about this (cells of 4..24 px).
GRID_TARGET_PX = 240


def grid_text(grid: np.ndarray) -> Text:
    """One grid as rich Text: a line per row, each cell its digit on its colour."""
    text = Text()
    for r, row in enumerate(np.asarray(grid)):
        if r:
            text.append("\n")
        for cell in row:
            c = int(cell)
            r_, g_, b_ = (int(v) for v in PALETTE[c])
            ink = "black" if c in _LIGHT else "white"
            text.append(f"{c} ", style=f"{ink} on #{r_:02x}{g_:02x}{b_:02x}")
    return text


def frame_colour(correct: bool | None) -> tuple[int, int, int]:
    """Green for a right attempt, red for a wrong one, grey when it is not known."""
    return UNKNOWN if correct is None else RIGHT if correct else WRONG


def cell_px(grids: Sequence[np.ndarray]) -> int:
    """Pixels per cell so the largest grid is about :data:`GRID_TARGET_PX` wide."""
    side = max((max(g.shape) for g in grids), default=1)
    return int(min(24, max(4, GRID_TARGET_PX // side)))


def grid_pixels(grid: np.ndarray, cell: int) -> np.ndarray:
    """RGB pixels of a grid: ``cell``-pixel squares with 1-pixel lines between them."""
    grid = np.asarray(grid, dtype=np.uint8)
    h, w = grid.shape
    out = np.empty((h * cell + 1, w * cell + 1, 3), dtype=np.uint8)
    out[:] = GRID_LINE
    for r in range(h):
        for c in range(w):
            top, left = r * cell + 1, c * cell + 1
            out[top : top + cell - 1, left : left + cell - 1] = PALETTE[grid[r, c]]
    return out


def framed(pixels: np.ndarray, colour: tuple[int, int, int] | None) -> np.ndarray:
    """``pixels`` inside a :data:`FRAME_PX` frame of ``colour`` (white: no frame)."""
    h, w, _ = pixels.shape
    out = np.empty((h + 2 * FRAME_PX, w + 2 * FRAME_PX, 3), dtype=np.uint8)
    out[:] = colour if colour is not None else WHITE
    out[FRAME_PX : FRAME_PX + h, FRAME_PX : FRAME_PX + w] = pixels
    return out


def panel_rows(
    rows: Sequence[Sequence[tuple[np.ndarray, tuple[int, int, int] | None]]],
) -> np.ndarray:
    """One RGB picture of rows of framed grids ``(grid, frame colour or None)``: the n-th
    grids of all rows share a column, each top-left aligned in its cell, with
    :data:`GAP_PX` of white around and between them."""
    cell = cell_px([g for row in rows for g, _ in row])
    pictures = [[framed(grid_pixels(g, cell), colour) for g, colour in row] for row in rows]
    heights = [max(p.shape[0] for p in row) for row in pictures]
    columns = max(len(row) for row in pictures)
    widths = [max(row[n].shape[1] for row in pictures if n < len(row)) for n in range(columns)]
    canvas = np.empty(
        (sum(heights) + GAP_PX * (len(rows) + 1), sum(widths) + GAP_PX * (columns + 1), 3),
        dtype=np.uint8,
    )
    canvas[:] = WHITE
    top = GAP_PX
    for row, height in zip(pictures, heights, strict=True):
        left = GAP_PX
        for p, width in zip(row, widths, strict=False):
            canvas[top : top + p.shape[0], left : left + p.shape[1]] = p
            left += width + GAP_PX
        top += height + GAP_PX
    return canvas


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``pixels`` ``[height, width, 3]`` uint8 (no filtering)."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    height, width, channels = pixels.shape
    if channels != 3 or height < 1 or width < 1:
        raise ValueError(f"PNG pixels must be [h, w, 3] with h, w >= 1; got {pixels.shape}")
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def write_png(path: Path, pixels: np.ndarray) -> None:
    """Write ``pixels`` to ``path`` as a PNG (OSError as the file system raises it)."""
    Path(path).write_bytes(png_bytes(pixels))
