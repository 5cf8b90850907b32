"""The run spec's schema: the four sections, the whole spec, and one adaptation's record.

Each section is a frozen attrs class: ``[arch]`` (the network, with the reference
implementation's names), ``[train]`` (optimisation), ``[data]`` (which task and where its
files are) and ``[runtime]`` (device, precision, threads). The tuples name the values a text
setting may take (checked by :func:`trm.spec.checks.validate`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from attrs import field, frozen

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# runtime.device: "auto" or a name a loaded backend plugin claims (cpu, xla; NAME:N for one of
# several devices); which names are claimed is checked when plugins are loaded
# (trm.plan.backends).
DEVICE_NAME = re.compile(r"^[a-z][a-z0-9_.-]*(:[0-9]+)?$")
COMPILE_CHOICES = ("auto", "on", "off")
CUDA_GRAPHS_CHOICES = ("auto", "on", "off")
HOST_MEMORY_CHOICES = ("auto", "reuse", "system")
ACTIVATION_CHECKPOINTING_CHOICES = ("auto", "on", "off")
READERS = ("auto", "memory", "stream")
POS_ENCODINGS = ("rope", "learned", "none")
LOSSES = ("stablemax", "softmax")


@frozen
class ArchSpec:
    """The TRM network. Names follow the reference implementation."""

    hidden_size: int = 512
    expansion: float = 4.0
    num_heads: int = 8
    L_layers: int = 2
    H_cycles: int = 3
    L_cycles: int = 6
    pos_encodings: str = "rope"
    mlp_t: bool = False
    puzzle_emb_ndim: int = 512
    puzzle_emb_len: int = 16
    halt_max_steps: int = 16
    halt_exploration_prob: float = 0.1
    no_ACT_continue: bool = True
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    loss: str = "stablemax"
    # local 2-D attention window: a grid cell attends to the cells within this many rows and
    # columns of it and to the puzzle prefix; 0 is dense attention (trm.model.window)
    attention_window: int = 0
    # the modified SwiGLU of Speed is Confidence (arXiv 2601.19085): sigmoid(gate) *
    # rms_norm(gate * up) in place of silu(gate) * up in every SwiGLU (trm.model.layers)
    swiglu_norm: bool = False


@frozen
class TrainSpec:
    """Optimisation. One step is one optimizer update over ``global_batch_size`` rows."""

    global_batch_size: int = 768
    max_steps: int = 0
    # a wall-time budget for the training steps (0: off): trm run times a few steps at each
    # recursion depth the run trains at and plans max_steps to fill it (trm.plan.budget);
    # max_steps is then the fallback, used when --max-steps or --set train.max_steps is given
    time_budget_s: float = 0.0
    epochs: float = 1.0
    lr: float = 1e-4
    lr_min_ratio: float = 1.0
    lr_warmup_steps: int = 2000
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    # the dense optimizer, by a name an optimizer plugin offers (dense_optimizers hook):
    # adam_atan2 and adamw built in, lion with trm[lion]
    optimizer: str = "adam_atan2"
    # train.optimizer = "muon" (trm.plugins.optimizers.muon): Muon's settings for the hidden
    # weight matrices (the rest take the companion AdamW with lr, betas and weight_decay);
    # defaults are Speed is Confidence's (arXiv 2601.19085)
    muon_lr: float = 0.02
    muon_momentum: float = 0.6
    muon_weight_decay: float = 0.005
    muon_ns_steps: int = 3
    puzzle_emb_lr: float = 1e-2
    puzzle_emb_weight_decay: float = 0.1
    ema: bool = False
    ema_rate: float = 0.999
    seed: int = 0
    eval_interval: int = 0
    eval_max_examples: int = 0
    # a task evaluator (ARC's vote) pools the predictions of every evaluation of the run, as
    # the reference does unless reset; false: each evaluation starts empty
    eval_pool: bool = False
    # answers the task's rules refuse are tried again under the task's symmetries, up to this
    # many attempts in all (1: the puzzle as given only); evaluations then also report
    # exact_accuracy@K (trm.evaluation.attempts)
    eval_attempts: int = 1
    # test-time exploration in the evaluations (trm.evaluation.explore; docs/test-time.md):
    # each puzzle run as this many trajectories (1: the plain run), noise of standard
    # deviation eval_noise in all but the first, the answer chosen by the selection rule
    # eval_select ("": the task's default); evaluations then also report the oracle and
    # explore@N/RULE figures
    eval_explore: int = 1
    eval_noise: float = 0.3  # as trm.evaluation.explore.DEFAULT_NOISE (a test keeps them equal)
    eval_select: str = ""
    checkpoint_interval_steps: int = 0
    checkpoint_keep: int = 3
    # winner-take-all latents (Speed is Confidence): K reasoning states z_L per puzzle carried
    # through the supervision steps, only the lowest-loss one trained (trm.model.candidates);
    # 1 is plain TRM training
    latent_candidates: int = 1

    def total_steps(self, epoch_rows: int) -> int:
        """Steps of the whole schedule: ``max_steps``, else ``epochs`` of ``epoch_rows`` rows
        (the examples one epoch reads: one puzzle per group with all its examples, so the
        train split's groups when every puzzle has one example; see trm.data.sampler)."""
        if self.max_steps > 0:
            return self.max_steps
        return max(1, math.ceil(self.epochs * max(epoch_rows, 1) / self.global_batch_size))


# data.source of a spec whose datasets are ``[[data.mix]]`` tables (set by trm.spec.files)
MIX_SOURCE = "mix"


@frozen
class MixEntry:
    """One dataset of a multi-task mix (a ``[[data.mix]]`` table): a built dataset folder
    (``dir``) or a source's generated task (``source`` with ``[data.mix.generate]``), as
    ``[data]`` names one, and its sampling ``weight`` (each training row is drawn from this
    task with probability weight / sum of weights). ``name`` labels the task in metrics
    (``exact_accuracy/NAME``) and in ``trm solve --task``; empty: the source's name."""

    source: str = ""
    dir: str = ""
    generate: dict[str, Any] = field(factory=dict)
    weight: float = 1.0
    name: str = ""

    @property
    def task(self) -> str:
        """The task's label: ``name``, else the source's name."""
        return self.name or self.source


@frozen
class DataSpec:
    """Which task, and where its puzzle-dataset directory is.

    ``dir`` empty means: build the data with the source's generator from ``[data.generate]``
    into the run directory (cached there, rebuilt only when the options change).

    ``mix`` (``[[data.mix]]`` tables) trains one model on several datasets instead; then
    ``source`` is ``"mix"`` and ``dir`` and ``generate`` stay empty (trm.plan.mix).
    """

    source: str = "sudoku"
    dir: str = ""
    train_split: str = "train"
    eval_split: str = "test"
    # auto: the whole train split in memory when it takes at most a quarter of the memory
    # budget, else streamed from disk; memory or stream to choose (trm.data.reader)
    reader: str = "auto"
    prefetch_steps: int = 4  # batches a reader prepares ahead (0: read in the loop)
    generate: dict[str, Any] = field(factory=dict)
    mix: tuple[MixEntry, ...] = ()

    @property
    def is_mix(self) -> bool:
        return self.source == MIX_SOURCE


@frozen
class RuntimeSpec:
    """Where and how the loop runs; ``auto`` lets the backend plugins choose."""

    device: str = "auto"
    precision: str = "auto"
    threads: int = 0
    compile: str = "auto"
    micro_batch_size: int = 0
    # auto: the backend decides (the cpu plugin keeps freed memory for reuse on Linux/glibc;
    # the extreme tier sets "system"); reuse: ask for it; system: the C library's defaults
    host_memory: str = "auto"
    # recompute the grad-carrying cycle's activations in backward instead of keeping them
    # (trm.model.trm): on, off, or auto (the tier chooses; off unless it fits a larger
    # micro-batch that is faster per sample; memory-guard may switch it on after OOM)
    activation_checkpointing: str = "auto"
    # replay the compiled network's kernels as CUDA graphs (torch.compile's "reduce-overhead"
    # mode): auto (on where the CUDA backend compiles), on, off; other backends have none
    cuda_graphs: str = "auto"


@frozen
class RunSpec:
    """A whole run: ``name`` labels the run directory; then the four sections.

    ``plugins`` maps a plugin's name to its own table (``[plugins.curriculum]``) as plain
    TOML data: the core checks only that each is a table naming an installed plugin; the
    plugin structures it strictly in its ``check_spec`` hook, errors naming
    ``plugins.NAME.KEY``.
    """

    name: str = "run"
    arch: ArchSpec = field(factory=ArchSpec)
    train: TrainSpec = field(factory=TrainSpec)
    data: DataSpec = field(factory=DataSpec)
    runtime: RuntimeSpec = field(factory=RuntimeSpec)
    plugins: dict[str, Any] = field(factory=dict)


@frozen
class Change:
    """One change an ``adapt_config`` plugin made to a spec: ``key`` (``runtime.threads``)
    went from ``old`` to ``new`` because of ``reason``. Shown to the user before training
    and written to adaptations.json."""

    key: str
    old: Any
    new: Any
    reason: str

    def describe(self) -> str:
        """One line for the user: ``adapted KEY: OLD -> NEW (REASON)``."""
        return f"adapted {self.key}: {self.old} -> {self.new} ({self.reason})"
