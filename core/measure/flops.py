"""Analytic model FLOPs of one training sample: one puzzle through one supervision step.

The count is the usual "model FLOPs" of MFU: only the matrix products the model needs,
2 FLOPs per multiply-add, independent of how a backend executes them (no recomputation, no
padding, no elementwise work, no optimizer). For one sample of P positions (puzzle prefix +
sequence) and hidden size D:

- one call of the network ``net``: for every matrix of every layer, 2 × in × out × rows,
  where rows is P for maps along the hidden axis (attention's qkv and o, the SwiGLU) and D
  for the MLP across positions (``mlp_t``, a map along the position axis); with attention
  also the scores and the weighted sum, 2 × P² × D each, times the attention mask's density
  (the fraction of query-key pairs a local window, ``arch.attention_window``, allows: a
  kernel that skips the masked pairs needs only those; 1 for dense attention);
- forward: H_cycles × (L_cycles + 1) network calls, plus the heads (the LM head on the
  seq_len answer positions, the Q head on one position) and the token embedding counted as
  a one-hot product, 2 × vocab × D per token; the puzzle-embedding lookup copies a row and
  counts 0. Training with ``no_ACT_continue = false`` makes this pass twice (the second,
  without gradient, bootstraps the Q-continue target);
- backward: 2 × forward for the parts that carry gradient: the L_cycles + 1 calls of the
  last H cycle, the heads and the token embedding.
"""

from __future__ import annotations

from attrs import frozen

from trm.model.layers import swiglu_inner_width
from trm.model.trm import puzzle_prefix_len
from trm.model.window import grid_side, window_pairs
from trm.spec import ArchSpec

# Networks at least this wide spend most of a step in matrix products: there torch.compile
# pays for itself by default; for narrower ones its compile time is what decides.
MATMUL_BOUND_MIN_HIDDEN = 256


def matmul_bound(arch: ArchSpec) -> bool:
    """Whether ``arch`` is large enough for matrix-product speed to set the step time."""
    return arch.hidden_size >= MATMUL_BOUND_MIN_HIDDEN


@frozen
class ModelFlops:
    """FLOPs of one sample's supervision step, by part; totals are properties."""

    net_call: int  # one forward call of the network on one sample
    heads: int  # LM head + Q head, forward
    embeddings: int  # token embedding as a one-hot product, forward
    recursions: int  # passes through the recursion: 1, or 2 with the bootstrapped Q target
    net_calls: int  # network calls in one pass: H_cycles × (L_cycles + 1)
    grad_net_calls: int  # of which carry gradient (backward = 2 × their forward)
    attention_density: float = 1.0  # fraction of query-key pairs attention computes

    @property
    def forward_net_calls(self) -> int:
        return self.recursions * self.net_calls

    @property
    def forward(self) -> int:
        return self.recursions * (self.net_calls * self.net_call + self.heads + self.embeddings)

    @property
    def backward(self) -> int:
        return 2 * (self.grad_net_calls * self.net_call + self.heads + self.embeddings)

    @property
    def per_sample(self) -> int:
        """Forward + backward FLOPs of one training sample."""
        return self.forward + self.backward


def _swiglu_flops(width: int, expansion: float, rows: int) -> int:
    inner = swiglu_inner_width(width, expansion)
    return 2 * rows * (width * 2 * inner + inner * width)


def attention_pairs(arch: ArchSpec, seq_len: int) -> int:
    """Query-key pairs one attention call computes for one sample: all P² for dense
    attention, the window's allowed pairs with ``arch.attention_window`` (a sequence that is
    no square grid counts dense; the model refuses it)."""
    prefix = puzzle_prefix_len(arch)
    positions = prefix + seq_len
    side = grid_side(seq_len)
    if arch.attention_window <= 0 or side is None:
        return positions * positions
    return window_pairs(prefix, side, arch.attention_window)


def attention_density(arch: ArchSpec, seq_len: int) -> float:
    """The fraction of the P² query-key pairs attention computes (1.0 dense)."""
    positions = puzzle_prefix_len(arch) + seq_len
    return attention_pairs(arch, seq_len) / (positions * positions)


def net_call_flops(arch: ArchSpec, seq_len: int) -> int:
    """Forward FLOPs of one call of the network on one sample of ``seq_len`` cells."""
    positions = puzzle_prefix_len(arch) + seq_len
    hidden = arch.hidden_size
    per_layer = _swiglu_flops(hidden, arch.expansion, positions)
    if arch.mlp_t:
        per_layer += _swiglu_flops(positions, arch.expansion, hidden)
    else:
        per_layer += 2 * positions * (hidden * 3 * hidden + hidden * hidden)  # qkv, o
        pairs = attention_pairs(arch, seq_len)
        per_layer += 2 * 2 * pairs * hidden  # scores and weighted sum over the allowed pairs
    return arch.L_layers * per_layer


def model_flops(arch: ArchSpec, seq_len: int, vocab_size: int) -> ModelFlops:
    """The analytic FLOPs of one training sample for ``arch`` on a task of this shape."""
    # Without no_ACT_continue, training bootstraps the Q-continue target from one more pass
    # through the recursion (embeddings, network calls, heads), without gradient.
    bootstrapped = not arch.no_ACT_continue and arch.halt_max_steps > 1
    hidden = arch.hidden_size
    return ModelFlops(
        net_call=net_call_flops(arch, seq_len),
        heads=2 * seq_len * hidden * vocab_size + 2 * hidden * 2,
        embeddings=2 * seq_len * vocab_size * hidden,
        recursions=2 if bootstrapped else 1,
        net_calls=arch.H_cycles * (arch.L_cycles + 1),
        grad_net_calls=arch.L_cycles + 1,
        attention_density=1.0 if arch.mlp_t else attention_density(arch, seq_len),
    )
