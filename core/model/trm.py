"""The Tiny Recursive Model with its ACT (adaptive computation time) wrapper.

One call of :meth:`TinyRecursiveModel.forward` is one *supervision step*: rows whose previous
step halted are reset and loaded with new data, then the shared network ``net`` refines the
latent answer ``z_H`` and reasoning state ``z_L``::

    repeat H_cycles times (all but the last without grad):
        repeat L_cycles times: z_L = net(z_L, z_H + x)
        z_H = net(z_H, z_L)

The new carry holds ``z_H``/``z_L`` detached, so gradients never cross supervision steps.
Names follow the reference implementation (SamsungSAILMontreal/TinyRecursiveModels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from attrs import define
from torch import Tensor, nn
from torch.func import functional_call
from torch.utils.checkpoint import checkpoint

from ..spec import ArchSpec
from ..spec.checks import check_attention_window
from .latent_noise import LatentNoise, add_noise
from .layers import (
    Attention,
    CosSin,
    Embedding,
    Linear,
    RotaryEmbedding,
    SwiGLU,
    rms_norm,
    trunc_normal_,
)
from .region import RecursionRegion
from .sparse_embedding import SparsePuzzleEmbedding
from .window import WindowMasks

IGNORE_LABEL_ID = -100
DATA_KEYS = ("inputs", "labels", "puzzle_identifiers")
Rows = slice | int | Tensor


@define
class TRMCarry:
    """State carried between supervision steps, one row per sequence of the batch.

    ``z_H``, ``z_L`` [B, L, D] float (L = puzzle prefix + seq_len), ``steps`` int32 [B],
    ``halted`` bool [B], ``current_data`` with ``inputs``/``labels`` int64 [B, seq_len] and
    ``puzzle_identifiers`` int64 [B] (labels use -100 for ignored cells).
    """

    z_H: Tensor
    z_L: Tensor
    steps: Tensor
    halted: Tensor
    current_data: dict[str, Tensor]

    @property
    def batch_size(self) -> int:
        return self.steps.shape[0]

    def index_rows(self, rows: Rows) -> TRMCarry:
        """A carry of the selected rows (views for a slice, copies for an index tensor)."""
        if isinstance(rows, int):
            rows = slice(rows, rows + 1)
        return TRMCarry(
            z_H=self.z_H[rows],
            z_L=self.z_L[rows],
            steps=self.steps[rows],
            halted=self.halted[rows],
            current_data={k: v[rows] for k, v in self.current_data.items()},
        )

    def assign_rows(self, rows: Rows, other: TRMCarry) -> None:
        """Write ``other`` (a carry with as many rows as ``rows`` selects) into those rows."""
        if isinstance(rows, int):
            rows = slice(rows, rows + 1)
        with torch.no_grad():
            self.z_H[rows] = other.z_H.to(self.z_H.dtype)
            self.z_L[rows] = other.z_L.to(self.z_L.dtype)
            self.steps[rows] = other.steps
            self.halted[rows] = other.halted
            for key, value in self.current_data.items():
                value[rows] = other.current_data[key]

    def to(self, device: torch.device | str) -> TRMCarry:
        """The carry on ``device``."""
        return TRMCarry(
            z_H=self.z_H.to(device),
            z_L=self.z_L.to(device),
            steps=self.steps.to(device),
            halted=self.halted.to(device),
            current_data={k: v.to(device) for k, v in self.current_data.items()},
        )

    def state_dict(self) -> dict[str, Tensor]:
        """Flat mapping of plain tensors (data keys prefixed ``data.``) for checkpoints: host
        copies, each made once straight from the device (never a clone on the device first)."""
        state = {"z_H": self.z_H, "z_L": self.z_L, "steps": self.steps, "halted": self.halted}
        state.update({f"data.{k}": v for k, v in self.current_data.items()})
        return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Tensor]) -> TRMCarry:
        """Inverse of :meth:`state_dict`."""
        return cls(
            z_H=state["z_H"],
            z_L=state["z_L"],
            steps=state["steps"],
            halted=state["halted"],
            current_data={
                k.removeprefix("data."): v for k, v in state.items() if k.startswith("data.")
            },
        )


class TRMBlock(nn.Module):
    """Post-norm block: token mixing (attention or an MLP across positions), then a SwiGLU.

    Token-major blocks read and return [B, P, hidden], as the reference implementation does
    (its MLP across positions transposes to [B, hidden, P] and back). Position-major blocks
    (MLP variant only) read and return [P, B, hidden]: both mixing directions are then single
    matrix products with no transposes (see :meth:`SwiGLU.forward_leading`). Both compute
    the same function.
    """

    def __init__(self, arch: ArchSpec, num_positions: int, position_major: bool) -> None:
        super().__init__()
        self.eps = arch.rms_norm_eps
        self.mixes_with_mlp = arch.mlp_t
        self.position_major = position_major
        norm_eps = arch.rms_norm_eps if arch.swiglu_norm else None
        if arch.mlp_t:
            self.mlp_t = SwiGLU(num_positions, arch.expansion, norm_eps)
        else:
            self.self_attn = Attention(arch.hidden_size, arch.num_heads)
        self.mlp = SwiGLU(arch.hidden_size, arch.expansion, norm_eps)

    def forward(self, x: Tensor, cos_sin: CosSin | None = None, mask=None) -> Tensor:
        if self.mixes_with_mlp and self.position_major:
            mixed = self.mlp_t.forward_leading(x.reshape(x.shape[0], -1)).view(x.shape)
            x = rms_norm(x + mixed, self.eps, dim=0)  # normalised across positions
        elif self.mixes_with_mlp:
            xt = x.transpose(1, 2)
            x = rms_norm(xt + self.mlp_t(xt), self.eps).transpose(1, 2)
        else:
            x = rms_norm(x + self.self_attn(x, cos_sin, mask), self.eps)
        return rms_norm(x + self.mlp(x), self.eps)


class RecursiveNet(nn.Module):
    """The one shared network: ``net(h, injection) = blocks(h + injection)``.

    ``h`` and ``injection`` are [P, B, hidden] when ``position_major``, else [B, P, hidden].
    """

    def __init__(self, arch: ArchSpec, num_positions: int, position_major: bool) -> None:
        super().__init__()
        self.position_major = position_major
        self.layers = nn.ModuleList(
            TRMBlock(arch, num_positions, position_major) for _ in range(arch.L_layers)
        )

    def forward(
        self, h: Tensor, injection: Tensor, cos_sin: CosSin | None = None, mask=None
    ) -> Tensor:
        h = h + injection
        for layer in self.layers:
            h = layer(h, cos_sin, mask)
        return h


def recomputed_in_backward(net: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``net`` whose activations autograd does not keep: each call keeps its inputs and runs
    again in backward (``torch.utils.checkpoint``, non-reentrant, so it composes with
    torch.compile, autocast and the outer ``no_grad`` of the other cycles; the RNG state is
    restored for the rerun, so a dropout would draw the same)."""

    def call(h: Tensor, injection: Tensor, cos_sin: CosSin | None, mask=None) -> Tensor:
        return checkpoint(net, h, injection, cos_sin, mask, use_reentrant=False)

    return call


def puzzle_prefix_len(arch: ArchSpec) -> int:
    """Number of prefix tokens: ``puzzle_emb_len`` if > 0, else ceil(puzzle_emb_ndim / hidden)."""
    if arch.puzzle_emb_len > 0:
        return arch.puzzle_emb_len
    return -(-arch.puzzle_emb_ndim // arch.hidden_size)


class TinyRecursiveModel(nn.Module):
    """TRM with ACT halting; see the module docstring for the recursion.

    ``forward(carry, batch) -> (new_carry, outputs)`` with outputs ``logits`` [B, seq_len,
    vocab] (autocast dtype), ``q_halt_logits`` and ``q_continue_logits`` float32 [B], and,
    in training with ``no_ACT_continue`` false, ``target_q_continue`` float32 [B].
    Randomness (exploration) uses the global torch RNG.

    ``position_major`` chooses how the MLP variant lays out its activations inside the
    recursion (see :class:`TRMBlock`): None (default) is position-major for ``mlp_t``,
    False the reference's token-major formulation. Same function, same parameters.
    """

    def __init__(
        self,
        arch: ArchSpec,
        seq_len: int,
        vocab_size: int,
        num_puzzle_identifiers: int,
        position_major: bool | None = None,
    ) -> None:
        super().__init__()
        self.arch = arch
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.num_puzzle_identifiers = num_puzzle_identifiers
        hidden = arch.hidden_size
        self.puzzle_emb_len = puzzle_prefix_len(arch)
        self.num_positions = self.puzzle_emb_len + seq_len
        self.embed_scale = math.sqrt(hidden)

        self.embed_tokens = Embedding(vocab_size, hidden, init_std=1.0 / self.embed_scale)
        self.puzzle_emb: SparsePuzzleEmbedding | None = None
        if arch.puzzle_emb_ndim > 0:
            self.puzzle_emb = SparsePuzzleEmbedding(
                num_puzzle_identifiers, arch.puzzle_emb_ndim, init_std=0.0
            )
        self.rotary_emb: RotaryEmbedding | None = None
        self.embed_pos: Embedding | None = None
        if arch.pos_encodings == "rope":
            self.rotary_emb = RotaryEmbedding(
                hidden // arch.num_heads, self.num_positions, arch.rope_theta
            )
        elif arch.pos_encodings == "learned":
            self.embed_pos = Embedding(self.num_positions, hidden, init_std=1.0 / self.embed_scale)

        if position_major is None:
            position_major = arch.mlp_t
        if position_major and not arch.mlp_t:
            raise ValueError("position_major needs the MLP variant (arch.mlp_t = true)")
        self.net = RecursiveNet(arch, self.num_positions, position_major)
        # The unit torch.compile compiles (trm.model.region), kept out of the registered
        # submodules so that state-dict keys are the same compiled or not.
        self.region: RecursionRegion
        object.__setattr__(self, "region", RecursionRegion())
        self.window_masks: WindowMasks | None = None
        if arch.attention_window > 0:
            side = check_attention_window(arch, seq_len)
            self.window_masks = WindowMasks(self.puzzle_emb_len, side, arch.attention_window)
        self.register_buffer("H_init", trunc_normal_(torch.empty(hidden), std=1.0))
        self.register_buffer("L_init", trunc_normal_(torch.empty(hidden), std=1.0))

        self.lm_head = Linear(hidden, vocab_size, bias=False)
        self.q_head = Linear(hidden, 2, bias=True)
        with torch.no_grad():
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)
        # In force now; the spec's values unless a schedule changed them (set_recursion).
        self.H_cycles = arch.H_cycles
        self.L_cycles = arch.L_cycles
        self.halt_exploration_prob = arch.halt_exploration_prob
        # Recompute the grad-carrying calls' activations in backward (set_activation_checkpointing)
        self.activation_checkpointing = False
        # Test-time exploration's noise in z_L (latent_noise_on); None: the plain recursion
        self.latent_noise: LatentNoise | None = None

    # ----------------------------------------------------------------- schedules

    def set_activation_checkpointing(self, on: bool) -> None:
        """Keep (False) or recompute (True) the grad-carrying calls' activations from the
        next call on.

        With it on, each of the last H cycle's ``L_cycles + 1`` calls of ``net`` runs under
        ``torch.utils.checkpoint`` (non-reentrant): autograd keeps only the call's inputs and
        runs the call again, one at a time, in backward. Same function, same gradients (bit
        for bit on the CPU in float32: the recomputation repeats the same kernels on the same
        inputs); one more forward of the grad-carrying calls per micro-batch. The loop sets it
        from ``runtime.activation_checkpointing`` and from the memory guard's request, and
        the checkpoint records it.
        """
        self.activation_checkpointing = bool(on)

    def set_recursion(
        self,
        H_cycles: int | None = None,
        L_cycles: int | None = None,
        halt_exploration_prob: float | None = None,
    ) -> None:
        """Change the recursion depth or the halting exploration for the next calls.

        The model starts with the spec's values (``arch.H_cycles``, ``arch.L_cycles``,
        ``arch.halt_exploration_prob``); a training schedule may change them between steps.
        No shape depends on them, so weights, optimizer state and the carry stay valid; a
        compiled :attr:`region` compiles once more for each depth it has not run at. A value
        left None is kept. ValueError for a depth below 1 or a probability outside [0, 1].
        """
        if H_cycles is not None:
            if H_cycles < 1:
                raise ValueError(f"H_cycles must be at least 1, got {H_cycles}")
            self.H_cycles = int(H_cycles)
        if L_cycles is not None:
            if L_cycles < 1:
                raise ValueError(f"L_cycles must be at least 1, got {L_cycles}")
            self.L_cycles = int(L_cycles)
        if halt_exploration_prob is not None:
            if not 0.0 <= halt_exploration_prob <= 1.0:
                raise ValueError(
                    f"halt_exploration_prob must be in [0, 1], got {halt_exploration_prob}"
                )
            self.halt_exploration_prob = float(halt_exploration_prob)

    @contextmanager
    def latent_noise_on(self, noise: LatentNoise) -> Iterator[None]:
        """Add ``noise`` to ``z_L`` at the start of every full recursion (H cycle) of the calls
        made inside the block (:mod:`trm.model.latent_noise`); its rows must match their
        batches'. Outside the block the recursion is the plain one: nothing is added or drawn.
        """
        previous, self.latent_noise = self.latent_noise, noise
        try:
            yield
        finally:
            self.latent_noise = previous

    def recursion_in_force(self) -> dict[str, int | float]:
        """``H_cycles``, ``L_cycles`` and ``halt_exploration_prob`` as the next call uses them."""
        return {
            "H_cycles": self.H_cycles,
            "L_cycles": self.L_cycles,
            "halt_exploration_prob": self.halt_exploration_prob,
        }

    # ----------------------------------------------------------------- sizes

    def count_parameters(self) -> int:
        """Number of trainable parameters (the puzzle table is a buffer, not counted)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def puzzle_embedding_numel(self) -> int:
        """Number of entries in the puzzle-embedding table (0 without one)."""
        return 0 if self.puzzle_emb is None else self.puzzle_emb.weights.numel()

    # ----------------------------------------------------------------- pieces

    def input_embeddings(self, inputs: Tensor, puzzle_identifiers: Tensor) -> Tensor:
        """Token (and puzzle-prefix, position) embeddings x [B, P + seq_len, hidden], scaled."""
        hidden = self.arch.hidden_size
        tokens = self.embed_tokens(inputs)
        prefix_len = self.puzzle_emb_len
        if self.puzzle_emb is not None:
            puzzle = self.puzzle_emb(puzzle_identifiers)
            puzzle = F.pad(puzzle, (0, prefix_len * hidden - puzzle.shape[-1]))
            prefix = puzzle.view(-1, prefix_len, hidden).to(tokens.dtype)
            tokens = torch.cat((prefix, tokens), dim=1)
        elif prefix_len > 0:
            prefix = tokens.new_zeros(tokens.shape[0], prefix_len, hidden)
            tokens = torch.cat((prefix, tokens), dim=1)
        if self.embed_pos is not None:
            tokens = 0.707106781 * (tokens + self.embed_pos.weight)
        return self.embed_scale * tokens

    def cos_sin(self) -> CosSin | None:
        return None if self.rotary_emb is None else self.rotary_emb()

    def attention_mask(self, device: torch.device):
        """The mask of this step's attention calls: None (dense) without a window, else the
        window's BlockMask or additive mask (:meth:`trm.model.window.WindowMasks.for_call`),
        built once per device and dtype."""
        if self.window_masks is None:
            return None
        net_compiled = getattr(self.net, "_compiled_call_impl", None) is not None
        compiled = self.region.is_compiled() or net_compiled
        dtype = self.autocast_dtype() or self.H_init.dtype
        return self.window_masks.for_call(device, compiled, dtype)

    def autocast_dtype(self) -> torch.dtype | None:
        """The autocast dtype in effect on the model's device, or None without autocast."""
        device_type = self.H_init.device.type
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)

    def network_for_step(self) -> Callable[..., Tensor]:
        """``net`` as this supervision step calls it: ``f(h, injection, cos_sin) -> h``.

        Under autocast on the model's device every weight of ``net`` is cast to the autocast
        dtype here, once, and the step's calls share the cast copies (without this, calls
        compiled by torch.compile would cast all weights again on every call). The casts are
        part of the autograd graph, so gradients still reach the float32 weights. Without
        autocast it is ``net`` itself.
        """
        dtype = self.autocast_dtype()
        if dtype is None:
            return self.net
        weights = {name: p.to(dtype) for name, p in self.net.named_parameters()}

        def call(h: Tensor, injection: Tensor, cos_sin: CosSin | None, mask=None) -> Tensor:
            return functional_call(self.net, weights, (h, injection, cos_sin, mask))

        return call

    def recurse(
        self, z_H: Tensor, z_L: Tensor, data: Mapping[str, Tensor]
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """One supervision step of recursion on ``data``.

        Returns ``(z_H, z_L, logits, q_halt_logits, q_continue_logits)``; only the last H
        cycle is differentiable, z_H/z_L are returned with their graph (detach to carry).
        The depth is the one in force (:meth:`set_recursion`; the spec's by default). With
        latent noise on (:meth:`latent_noise_on`) each H cycle first adds it to ``z_L``.

        The embeddings, the attention mask and the noise draws are made here, eagerly; the
        recursion itself runs through :attr:`region` (:mod:`trm.model.region`), the unit
        torch.compile compiles.
        """
        cos_sin = self.cos_sin()
        mask = self.attention_mask(data["inputs"].device)
        x = self.input_embeddings(data["inputs"], data["puzzle_identifiers"])
        noise = None
        if self.latent_noise is not None:
            position_major = self.net.position_major
            state = z_L.transpose(0, 1) if position_major else z_L
            noise = tuple(
                self.latent_noise.addend(state, position_major) for _ in range(self.H_cycles)
            )
        return self.region(self, z_H, z_L, x, cos_sin, mask, noise)

    def recursion(
        self,
        z_H: Tensor,
        z_L: Tensor,
        x: Tensor,
        cos_sin: CosSin | None,
        mask: Any,
        noise: tuple[Tensor, ...] | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The recursion of :meth:`recurse` from the input embeddings ``x`` on: the H and L
        cycles and the output heads. ``noise``: one float32 addend for ``z_L`` per H cycle
        (in the recursion's layout), or None. Called through :attr:`region`."""
        H_cycles, L_cycles = self.H_cycles, self.L_cycles
        position_major = self.net.position_major
        # As in the reference, under autocast the states are kept in the autocast dtype
        # (norms compute in float32); the MLP variant also goes position-major here.
        dtype = self.autocast_dtype()
        states = (z_H, z_L, x)
        if position_major:  # [B, P, D] -> [P, B, D] for the whole recursion
            states = tuple(t.transpose(0, 1) for t in states)
        z_H, z_L, x = (t.to(dtype=dtype, memory_format=torch.contiguous_format) for t in states)
        net = self.network_for_step()
        with torch.no_grad():
            for cycle in range(H_cycles - 1):
                if noise is not None:
                    z_L = add_noise(z_L, noise[cycle])
                for _ in range(L_cycles):
                    z_L = net(z_L, z_H + x, cos_sin, mask)
                z_H = net(z_H, z_L, cos_sin, mask)
        grad_net = net
        if self.activation_checkpointing and torch.is_grad_enabled():
            grad_net = recomputed_in_backward(net)
        if noise is not None:
            z_L = add_noise(z_L, noise[H_cycles - 1])
        for _ in range(L_cycles):
            z_L = grad_net(z_L, z_H + x, cos_sin, mask)
        z_H = grad_net(z_H, z_L, cos_sin, mask)
        if position_major:
            logits = self.lm_head(z_H[self.puzzle_emb_len :]).transpose(0, 1)
            q = self.q_head(z_H[0]).float()
            z_H, z_L = z_H.transpose(0, 1).contiguous(), z_L.transpose(0, 1).contiguous()
        else:
            logits = self.lm_head(z_H[:, self.puzzle_emb_len :])
            q = self.q_head(z_H[:, 0]).float()
        return z_H, z_L, logits, q[..., 0], q[..., 1]

    # ----------------------------------------------------------------- carry

    def initial_carry(self, batch: Mapping[str, Tensor]) -> TRMCarry:
        """A carry for ``batch``'s size with every row halted, so the first step loads data."""
        inputs = batch["inputs"]
        size, device = inputs.shape[0], inputs.device
        shape = (size, self.num_positions, self.arch.hidden_size)
        return TRMCarry(
            z_H=torch.zeros(shape, dtype=self.H_init.dtype, device=device),
            z_L=torch.zeros(shape, dtype=self.L_init.dtype, device=device),
            steps=torch.zeros(size, dtype=torch.int32, device=device),
            halted=torch.ones(size, dtype=torch.bool, device=device),
            current_data={k: torch.zeros_like(v) for k, v in batch.items()},
        )

    def reset_carry(self, carry: TRMCarry, batch: Mapping[str, Tensor]) -> TRMCarry:
        """Halted rows restart: z_H = H_init, z_L = L_init, steps 0, data from ``batch``.

        Other rows keep their state and data. Returns a new carry (halted unchanged).
        """
        halted = carry.halted
        rows3 = halted.view(-1, 1, 1)
        data = {}
        for key, old in carry.current_data.items():
            new = batch[key]
            data[key] = torch.where(halted.view((-1,) + (1,) * (old.ndim - 1)), new, old)
        return TRMCarry(
            z_H=torch.where(rows3, self.H_init.to(carry.z_H.dtype), carry.z_H),
            z_L=torch.where(rows3, self.L_init.to(carry.z_L.dtype), carry.z_L),
            steps=torch.where(halted, torch.zeros_like(carry.steps), carry.steps),
            halted=halted,
            current_data=data,
        )

    # ----------------------------------------------------------------- step

    def draw_min_halt_steps(self, batch_size: int, device: torch.device | str) -> Tensor:
        """Exploration draws for ``batch_size`` rows: 0 (no minimum) or 2..halt_max_steps.

        A row is held to its minimum with probability ``halt_exploration_prob`` (the value in
        force, see :meth:`set_recursion`). The loop
        draws once per optimizer step for the whole global batch and passes slices to
        ``forward``, so splitting the batch into micro-batches leaves the draws unchanged.
        """
        arch = self.arch
        explore = torch.rand(batch_size, device=device) < self.halt_exploration_prob
        high = max(arch.halt_max_steps, 2) + 1
        minimum = torch.randint(2, high, (batch_size,), device=device, dtype=torch.int32)
        return explore * minimum

    def forward(
        self,
        carry: TRMCarry,
        batch: Mapping[str, Tensor],
        min_halt_steps: Tensor | None = None,
    ) -> tuple[TRMCarry, dict[str, Tensor]]:
        """One supervision step; see the class docstring for outputs.

        Halting: a row halts when ``steps >= halt_max_steps``; in training (and
        halt_max_steps > 1) also when Q says so (``q_halt > 0``, or ``q_halt > q_continue``
        without ``no_ACT_continue``), except that with probability ``halt_exploration_prob``
        a row is held to a random minimum of 2..halt_max_steps steps. Eval halts only at
        halt_max_steps, so a whole eval batch halts together. ``min_halt_steps`` gives the
        exploration draws (see ``draw_min_halt_steps``); None draws them here.
        """
        carry = self.reset_carry(carry, batch)
        data = carry.current_data
        z_H, z_L, logits, q_halt, q_continue = self.recurse(carry.z_H, carry.z_L, data)
        z_H, z_L = z_H.detach(), z_L.detach()
        outputs = {"logits": logits, "q_halt_logits": q_halt, "q_continue_logits": q_continue}
        steps, halted = self.halting(carry.steps, outputs, z_H, z_L, data, min_halt_steps)
        new_carry = TRMCarry(z_H=z_H, z_L=z_L, steps=steps, halted=halted, current_data=data)
        return new_carry, outputs

    def halting(
        self,
        steps_before: Tensor,
        outputs: dict[str, Tensor],
        z_H: Tensor,
        z_L: Tensor,
        data: Mapping[str, Tensor],
        min_halt_steps: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """``(steps, halted)`` after a supervision step whose ``outputs`` came from the
        (detached) states ``z_H``, ``z_L`` on ``data`` (see :meth:`forward` for the rule);
        adds ``target_q_continue`` to ``outputs`` where the rule bootstraps it."""
        arch = self.arch
        q_halt, q_continue = outputs["q_halt_logits"], outputs["q_continue_logits"]
        with torch.no_grad():
            steps = steps_before + 1
            is_last_step = steps >= arch.halt_max_steps
            halted = is_last_step
            if self.training and arch.halt_max_steps > 1:
                if arch.no_ACT_continue:
                    halted = halted | (q_halt > 0)
                else:
                    halted = halted | (q_halt > q_continue)
                if min_halt_steps is None:
                    min_halt_steps = self.draw_min_halt_steps(steps.shape[0], steps.device)
                halted = halted & (steps >= min_halt_steps)
                if not arch.no_ACT_continue:
                    # Bootstrapped Q target from one more pass (no replay buffer/target net).
                    _, _, _, next_halt, next_continue = self.recurse(z_H, z_L, data)
                    outputs["target_q_continue"] = torch.sigmoid(
                        torch.where(
                            is_last_step, next_halt, torch.maximum(next_halt, next_continue)
                        )
                    )
        return steps, halted
