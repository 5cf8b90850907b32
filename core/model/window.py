"""The local 2-D attention window (``arch.attention_window = k``): which query-key pairs a
windowed attention allows, how dense that is, and the masks that enforce it.

The sequence is the puzzle prefix (``prefix_len`` tokens first) followed by a square grid of
``side × side`` cells in row-major order. A grid cell attends to the grid cells within ``k``
rows and ``k`` columns of it (``|dr| <= k`` and ``|dc| <= k``) and to every prefix token;
a prefix token attends to everything. ``k = 0`` is dense attention (no mask at all).

Two masks say the same thing: an additive [P, P] matrix for
``scaled_dot_product_attention`` (0 where allowed, -inf elsewhere, in the attention's dtype:
a boolean mask would be converted to that on every call, and each grad-carrying call would
keep its own copy for backward), and a FlexAttention ``BlockMask`` whose blocks with no
allowed pair are skipped. Both are built once per (positions, device, dtype) by
:class:`WindowMasks` and reused by every call.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

try:  # FlexAttention: torch >= 2.5
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch
    BlockMask = None  # type: ignore[assignment,misc]
    create_block_mask = None  # type: ignore[assignment]
    flex_attention = None  # type: ignore[assignment]


def flex_attention_available() -> bool:
    """Whether this torch has FlexAttention (``torch.nn.attention.flex_attention``)."""
    return flex_attention is not None


def grid_side(seq_len: int) -> int | None:
    """The side of the square grid of ``seq_len`` cells, or None when it is not a square."""
    side = math.isqrt(seq_len)
    return side if side > 0 and side * side == seq_len else None


def window_pairs(prefix_len: int, side: int, window: int) -> int:
    """Number of allowed (query, key) pairs of the window over ``prefix_len + side²``
    positions: prefix rows see all P keys, grid rows see the prefix and their
    ``(2k+1)``-wide neighbourhood clipped at the grid's edges. ``window = 0``: all P²."""
    positions = prefix_len + side * side
    if window <= 0:
        return positions * positions
    reach = min(window, side - 1)
    # grid cells within `reach` of a cell along one axis, summed over the side's cells
    line_pairs = side * (2 * reach + 1) - reach * (reach + 1)
    return prefix_len * positions + side * side * prefix_len + line_pairs * line_pairs


def window_density(prefix_len: int, side: int, window: int) -> float:
    """The fraction of the P² query-key pairs the window allows (1.0 for dense)."""
    positions = prefix_len + side * side
    return window_pairs(prefix_len, side, window) / (positions * positions)


def _allowed(prefix_len: int, side: int, window: int, q: Tensor, kv: Tensor) -> Tensor:
    """Elementwise: may query position ``q`` attend to key position ``kv``."""
    q_cell, kv_cell = q - prefix_len, kv - prefix_len
    near_rows = (q_cell // side - kv_cell // side).abs() <= window
    near_cols = (q_cell % side - kv_cell % side).abs() <= window
    return (q < prefix_len) | (kv < prefix_len) | (near_rows & near_cols)


def window_bool_mask(
    prefix_len: int, side: int, window: int, device: torch.device | str = "cpu"
) -> Tensor:
    """The boolean [P, P] mask (True: the query in that row may attend to the key in that
    column), as ``scaled_dot_product_attention``'s ``attn_mask`` takes it."""
    positions = torch.arange(prefix_len + side * side, device=device)
    return _allowed(prefix_len, side, window, positions[:, None], positions[None, :])


def window_block_mask(prefix_len: int, side: int, window: int, device: torch.device | str):
    """The FlexAttention ``BlockMask`` of the window (default 128 × 128 blocks)."""
    positions = prefix_len + side * side

    def mask_mod(batch, head, q, kv):
        return _allowed(prefix_len, side, window, q, kv)

    return create_block_mask(mask_mod, None, None, positions, positions, device=str(device))


class WindowMasks:
    """The window's masks for one model, each built once per (positions, device)."""

    def __init__(self, prefix_len: int, side: int, window: int) -> None:
        self.prefix_len = prefix_len
        self.side = side
        self.window = window
        self._additive: dict[tuple[int, str, torch.dtype], Tensor] = {}
        self._block: dict[tuple[int, str], object] = {}

    @property
    def positions(self) -> int:
        return self.prefix_len + self.side * self.side

    @property
    def density(self) -> float:
        return window_density(self.prefix_len, self.side, self.window)

    def additive_mask(self, device: torch.device, dtype: torch.dtype) -> Tensor:
        """0 where the window allows a pair, -inf elsewhere, [P, P] in ``dtype``."""
        key = (self.positions, str(device), dtype)
        if key not in self._additive:
            allowed = window_bool_mask(self.prefix_len, self.side, self.window, device)
            mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
            self._additive[key] = mask.masked_fill_(~allowed, float("-inf"))
        return self._additive[key]

    def block_mask(self, device: torch.device):
        key = (self.positions, str(device))
        if key not in self._block:
            self._block[key] = window_block_mask(self.prefix_len, self.side, self.window, device)
        return self._block[key]

    def for_call(self, device: torch.device, compiled: bool, dtype: torch.dtype):
        """The mask this step's calls take: the BlockMask when the network is compiled and
        FlexAttention can run there (torch 2.13 has no FlexAttention backward on the CPU, so
        a CPU step with gradients takes the other), else the additive mask in ``dtype`` (the
        attention's: the autocast dtype, else float32)."""
        flex = compiled and flex_attention_available()
        if flex and device.type == "cpu" and torch.is_grad_enabled():
            flex = False
        return self.block_mask(device) if flex else self.additive_mask(device, dtype)


def is_block_mask(mask: object) -> bool:
    """Whether ``mask`` is a FlexAttention BlockMask (rather than a tensor)."""
    return BlockMask is not None and isinstance(mask, BlockMask)
