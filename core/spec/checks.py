"""The checks a spec passes after it type-checks: every number within its range, every text
setting one of its choices, and the settings that must agree with each other."""

from __future__ import annotations

import math
import re

from trm.errors import TrmError
from trm.spec.schema import (
    ACTIVATION_CHECKPOINTING_CHOICES,
    COMPILE_CHOICES,
    CUDA_GRAPHS_CHOICES,
    DEVICE_NAME,
    HOST_MEMORY_CHOICES,
    LOSSES,
    MIX_SOURCE,
    POS_ENCODINGS,
    PRECISIONS,
    READERS,
    ArchSpec,
    RunSpec,
)
from trm.spec.strict import value_words

# Sane bounds for every number in a spec: wide enough for any real run, narrow enough that a
# typo (an extra zero, a sign) is caught before it crashes a process or fills a disk.
MAX_SEED = 2**32 - 1  # NumPy's seed range
MAX_THREADS = 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _ranges(spec: RunSpec) -> list[tuple[str, float, float, float, bool]]:
    """(key path, value, low, high, low inclusive) for every bounded number of ``spec``."""
    a, t, r = spec.arch, spec.train, spec.runtime
    big = float(2**40)
    return [
        ("arch.hidden_size", a.hidden_size, 1, 65536, True),
        ("arch.expansion", a.expansion, 0, 64, False),
        ("arch.num_heads", a.num_heads, 1, 1024, True),
        ("arch.L_layers", a.L_layers, 1, 64, True),
        ("arch.H_cycles", a.H_cycles, 1, 64, True),
        ("arch.L_cycles", a.L_cycles, 1, 64, True),
        ("arch.puzzle_emb_ndim", a.puzzle_emb_ndim, 0, 2**20, True),
        ("arch.puzzle_emb_len", a.puzzle_emb_len, 0, 1024, True),
        ("arch.halt_max_steps", a.halt_max_steps, 1, 1024, True),
        ("arch.halt_exploration_prob", a.halt_exploration_prob, 0, 1, True),
        ("arch.rms_norm_eps", a.rms_norm_eps, 0, 1, False),
        ("arch.rope_theta", a.rope_theta, 0, 1e12, False),
        ("arch.attention_window", a.attention_window, 0, 1024, True),
        ("train.global_batch_size", t.global_batch_size, 1, 2**24, True),
        ("train.max_steps", t.max_steps, 0, big, True),
        ("train.time_budget_s", t.time_budget_s, 0, 1e7, True),
        ("train.epochs", t.epochs, 0, 1e9, True),
        ("train.lr", t.lr, 0, 10, False),
        ("train.lr_min_ratio", t.lr_min_ratio, 0, 1, True),
        ("train.lr_warmup_steps", t.lr_warmup_steps, 0, big, True),
        ("train.beta1", t.beta1, 0, 0.999999, True),
        ("train.beta2", t.beta2, 0, 0.999999, True),
        ("train.weight_decay", t.weight_decay, 0, 100, True),
        ("train.muon_lr", t.muon_lr, 0, 10, False),
        ("train.muon_momentum", t.muon_momentum, 0, 0.999999, False),
        ("train.muon_weight_decay", t.muon_weight_decay, 0, 100, True),
        ("train.muon_ns_steps", t.muon_ns_steps, 1, 99, True),
        ("train.latent_candidates", t.latent_candidates, 1, 64, True),
        ("train.puzzle_emb_lr", t.puzzle_emb_lr, 0, 100, True),
        ("train.puzzle_emb_weight_decay", t.puzzle_emb_weight_decay, 0, 100, True),
        ("train.ema_rate", t.ema_rate, 0, 0.999999999, False),
        ("train.seed", t.seed, 0, MAX_SEED, True),
        ("train.eval_interval", t.eval_interval, 0, big, True),
        ("train.eval_max_examples", t.eval_max_examples, 0, big, True),
        ("train.eval_attempts", t.eval_attempts, 1, 1024, True),
        ("train.eval_explore", t.eval_explore, 1, 1024, True),
        ("train.eval_noise", t.eval_noise, 0, 100, True),
        ("train.checkpoint_interval_steps", t.checkpoint_interval_steps, 0, big, True),
        ("train.checkpoint_keep", t.checkpoint_keep, 1, 1000, True),
        ("data.prefetch_steps", spec.data.prefetch_steps, 0, 1024, True),
        ("runtime.threads", r.threads, 0, MAX_THREADS, True),
        ("runtime.micro_batch_size", r.micro_batch_size, 0, t.global_batch_size, True),
    ]


_TASK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,49}$")


def _mix_problems(spec: RunSpec) -> list[str]:
    """What is wrong with ``[[data.mix]]`` (each ``data.mix: …``): a mix beside a ``[data]``
    dataset, fewer than two tables, a table without a source, a weight not above 0, two tasks
    of one name."""
    d = spec.data
    if not d.mix:
        if d.source == MIX_SOURCE:
            return ["data.mix: data.source = 'mix' needs [[data.mix]] tables"]
        return []
    problems = []
    if d.source != MIX_SOURCE or d.dir or d.generate:
        problems.append(
            "data.mix: [data] names a dataset as well (source, dir or [data.generate]); with "
            "[[data.mix]] tables each table names its own: remove them from [data]"
        )
    if len(d.mix) < 2:
        problems.append(
            "data.mix: a mix needs at least two [[data.mix]] tables; for one dataset use "
            "[data] source (or dir) instead"
        )
    names = [entry.task for entry in d.mix]
    for n, entry in enumerate(d.mix):
        key = f"data.mix[{n}]"
        if not entry.source or entry.source == MIX_SOURCE:
            problems.append(
                f"{key}.source: name the task's data source (sudoku, maze, arc, …), also "
                "when the table gives a dir"
            )
        if not (math.isfinite(entry.weight) and entry.weight > 0):
            problems.append(
                f"{key}.weight: {entry.weight!r} must be a finite number above 0 (the task's "
                "share of the training rows is weight / the sum of the weights)"
            )
        if entry.dir and entry.generate:
            problems.append(f"{key}: give a dir (a built dataset) or [generate] options, not both")
        if entry.task and not _TASK.match(entry.task):
            problems.append(
                f"{key}.name: {entry.task!r} must be 1-50 letters, digits, '_' or '-' (it "
                "names the task in metrics such as exact_accuracy/NAME)"
            )
        elif names.count(entry.task) > 1:
            problems.append(
                f"{key}.name: two tables are called {entry.task!r}; give each a distinct name"
            )
    return problems


def validate(spec: RunSpec, where: str) -> None:
    """Raise TrmError for values that type-check but cannot work, naming each key path and
    the range or choices it must keep to."""
    problems: list[str] = []

    def need(ok: bool, key: str, message: str) -> None:
        if not ok:
            problems.append(f"{key}: {message}")

    for key, value, low, high, low_inclusive in _ranges(spec):
        within = math.isfinite(value) and value <= high
        within = within and (value >= low if low_inclusive else value > low)
        bracket = "[" if low_inclusive else "("
        need(within, key, f"{value!r} is outside {bracket}{low:g}, {high:g}]")
    a, t, d, r = spec.arch, spec.train, spec.data, spec.runtime
    need(
        bool(_NAME.match(spec.name)),
        "name",
        f"{spec.name!r} must be 1-100 letters, digits, '.', '_' or '-', starting with a letter "
        "or digit (it names the run directory under runs/)",
    )
    need(
        a.hidden_size % max(a.num_heads, 1) == 0,
        "arch.hidden_size",
        f"{a.hidden_size} is not divisible by arch.num_heads={a.num_heads}",
    )
    need(
        a.mlp_t or (a.hidden_size // max(a.num_heads, 1)) % 2 == 0 or a.pos_encodings != "rope",
        "arch.num_heads",
        "RoPE needs an even head size (hidden_size / num_heads)",
    )
    need(a.pos_encodings in POS_ENCODINGS, "arch.pos_encodings", f"must be one of {POS_ENCODINGS}")
    need(a.loss in LOSSES, "arch.loss", f"must be one of {LOSSES}")
    need(
        not (a.mlp_t and a.attention_window > 0),
        "arch.attention_window",
        f"{a.attention_window} needs attention, but arch.mlp_t = true mixes positions with an "
        "MLP: set arch.mlp_t = false or arch.attention_window = 0",
    )
    need(
        a.puzzle_emb_ndim <= max(a.puzzle_emb_len, 1) * a.hidden_size,
        "arch.puzzle_emb_ndim",
        "must fit in puzzle_emb_len tokens of hidden_size",
    )
    need(t.max_steps > 0 or t.epochs > 0, "train.max_steps", "set max_steps or epochs above 0")
    need(
        bool(_NAME.match(t.optimizer)),
        "train.optimizer",
        f"{t.optimizer!r} must be an optimizer's name (e.g. adam_atan2)",
    )
    need(bool(d.source), "data.source", "name a data source, e.g. sudoku")
    for key, split in (("data.train_split", d.train_split), ("data.eval_split", d.eval_split)):
        need(bool(_SPLIT.match(split)), key, f"{split!r} must be a folder name (e.g. 'test')")
    need(d.reader in READERS, "data.reader", f"must be one of {READERS}")
    problems.extend(_mix_problems(spec))
    for name, table in spec.plugins.items():
        need(
            isinstance(table, dict),
            f"plugins.{name}",
            f"must be a table of the plugin's settings ([plugins.{name}]), got "
            f"{value_words(table)}",
        )
    need(
        bool(DEVICE_NAME.match(r.device)),
        "runtime.device",
        f"{r.device!r} is not a device name: 'auto' or a backend's name such as 'cpu', "
        "with ':N' for one of several devices (trm plugins lists the backends)",
    )
    need(r.precision in PRECISIONS, "runtime.precision", f"must be one of {PRECISIONS}")
    need(r.compile in COMPILE_CHOICES, "runtime.compile", f"must be one of {COMPILE_CHOICES}")
    need(
        r.cuda_graphs in CUDA_GRAPHS_CHOICES,
        "runtime.cuda_graphs",
        f"must be one of {CUDA_GRAPHS_CHOICES}",
    )
    need(
        r.host_memory in HOST_MEMORY_CHOICES,
        "runtime.host_memory",
        f"must be one of {HOST_MEMORY_CHOICES}",
    )
    need(
        r.activation_checkpointing in ACTIVATION_CHECKPOINTING_CHOICES,
        "runtime.activation_checkpointing",
        f"must be one of {ACTIVATION_CHECKPOINTING_CHOICES}",
    )
    if problems:
        raise TrmError(f"{where}: " + "; ".join(problems))


def check_attention_window(arch: ArchSpec, seq_len: int) -> int:
    """The grid side the window of ``arch.attention_window`` runs over, for a task of
    ``seq_len`` cells; TrmError when the architecture has no attention or the cells are not a
    square grid."""
    window = arch.attention_window
    if arch.mlp_t:
        raise TrmError(
            f"arch.attention_window = {window} needs attention, but arch.mlp_t = true mixes "
            "positions with an MLP: set arch.mlp_t = false or arch.attention_window = 0"
        )
    side = math.isqrt(seq_len)
    if side * side != seq_len or side == 0:
        raise TrmError(
            f"arch.attention_window = {window} needs a square grid, but the data's sequence "
            f"has {seq_len} cells (not side x side): set arch.attention_window = 0"
        )
    return side
