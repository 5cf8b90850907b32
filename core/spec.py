"""Run specs: the TOML file that says what to train and how.

A spec has four sections, each an attrs class: ``[arch]`` (the network, with the reference
implementation's names), ``[train]`` (optimisation), ``[data]`` (which task and where its
files are) and ``[runtime]`` (device, precision, threads); and optionally ``[plugins.NAME]``
tables, each a plugin's own settings, which that plugin structures and checks itself (the
``check_spec`` hook; :func:`structure_strict` with ``root="plugins.NAME"``). Specs are
frozen; every change — ``--set``, an ``adapt_config`` plugin — makes a new one with
:func:`attrs.evolve`.

cattrs is used only at the boundary (TOML in, TOML out). Structuring is strict: an unknown key,
a value of the wrong type, or an impossible value raises :class:`~trm.errors.TrmError` naming
the key path (``train.lr``) and what to do.
"""

from __future__ import annotations

import math
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import cattrs
import cattrs.cols
import cattrs.gen
import cattrs.v
import tomli_w
from attrs import field, frozen

from trm.errors import TrmError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# runtime.device: "auto" or a name a loaded backend plugin claims (cpu, xla; NAME:N for one of
# several devices); which names are claimed is checked when plugins are loaded
# (trm.plan.backends).
DEVICE_NAME = re.compile(r"^[a-z][a-z0-9_.-]*(:[0-9]+)?$")
COMPILE_CHOICES = ("auto", "on", "off")
HOST_MEMORY_CHOICES = ("auto", "reuse", "system")
ACTIVATION_CHECKPOINTING_CHOICES = ("auto", "on", "off")
READERS = ("auto", "memory", "stream")
POS_ENCODINGS = ("rope", "learned", "none")
LOSSES = ("stablemax", "softmax")
OPTIMIZERS = ("adam_atan2", "adamw")


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
    optimizer: str = "adam_atan2"
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
    checkpoint_interval_steps: int = 0
    checkpoint_keep: int = 3

    def total_steps(self, epoch_rows: int) -> int:
        """Steps of the whole schedule: ``max_steps``, else ``epochs`` of ``epoch_rows`` rows
        (the examples one epoch reads: one puzzle per group with all its examples, so the
        train split's groups when every puzzle has one example; see trm.data.sampler)."""
        if self.max_steps > 0:
            return self.max_steps
        return max(1, math.ceil(self.epochs * max(epoch_rows, 1) / self.global_batch_size))


@frozen
class DataSpec:
    """Which task, and where its puzzle-dataset directory is.

    ``dir`` empty means: build the data with the source's generator from ``[data.generate]``
    into the run directory (cached there, rebuilt only when the options change).
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


def _strict_converter() -> cattrs.Converter:
    """A converter that refuses unknown keys and never coerces between types. What it
    refuses raises TypeError("got …"), which :func:`_format_problem` words."""
    conv = cattrs.Converter(forbid_extra_keys=True)

    def exact(kind: type, accept: tuple[type, ...]):
        def structure(value: Any, _type: type) -> Any:
            if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accept):
                raise TypeError(f"got {_value_words(value)}")
            return kind(value)

        return structure

    def tables_only(cls: type) -> Any:
        inner = cattrs.gen.make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)

        def structure(value: Any, _type: type) -> Any:
            if not isinstance(value, dict):
                raise TypeError(f"got {_value_words(value)}")
            return inner(value, _type)

        return structure

    def lists_only(kind: Any) -> Any:
        inner = (
            cattrs.cols.homogenous_tuple_structure_factory(kind, conv)
            if typing.get_origin(kind) is tuple
            else cattrs.cols.list_structure_factory(kind, conv)
        )

        def structure(value: Any, _type: type) -> Any:
            if not isinstance(value, (list, tuple)):  # text is iterable, but no list
                raise TypeError(f"got {_value_words(value)}")
            return inner(value, _type)

        return structure

    conv.register_structure_hook_factory(attrs.has, tables_only)
    conv.register_structure_hook_factory(_is_list_type, lists_only)
    conv.register_structure_hook(int, exact(int, (int,)))
    conv.register_structure_hook(float, exact(float, (int, float)))
    conv.register_structure_hook(bool, exact(bool, (bool,)))
    conv.register_structure_hook(str, exact(str, (str,)))
    conv.register_structure_hook_func(
        lambda t: t == dict[str, Any], lambda v, _t: _require_table(v)
    )
    return conv


def _is_list_type(kind: Any) -> bool:
    """``list[X]`` or ``tuple[X, ...]``: what a TOML array structures into."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    return origin is list or (origin is tuple and args[-1:] == (...,))


def _require_table(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"got {_value_words(value)}")
    return dict(value)


def _value_words(value: Any) -> str:
    """A TOML value as the user wrote it: ``true``, ``5``, ``"abc"``, a list, a table."""
    if value is None:
        return "null"  # JSON's and YAML's (TOML has none)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, (list, tuple)):
        return f"a list ({len(value)} item{'s' if len(value) != 1 else ''})"
    if isinstance(value, dict):
        return "a table"
    return "a value of another kind"


_TYPE_WORDS = {int: "whole number", float: "number", str: "text", bool: "true or false"}


def _type_words(kind: Any, many: bool = False) -> str:
    """A spec type in TOML's words: ``a number``, ``a list of tables``, ``a table``."""
    if kind is type(None):
        return "nothing"
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        given = [a for a in args if a is not type(None)]
        words = " or ".join(_type_words(a, many) for a in given)
        return words + (" (or leave the key out)" if len(given) < len(args) else "")
    if origin in (list, tuple):
        return f"a list of {_type_words(args[0], many=True)}" if args else "a list"
    if origin is dict or kind is dict or attrs.has(kind):
        noun = "table"
    elif kind in _TYPE_WORDS:
        noun = _TYPE_WORDS[kind]
    else:
        noun = getattr(kind, "__name__", str(kind))
    if noun == "true or false":
        return "true or false values" if many else noun
    return f"{noun}s" if many else f"a {noun}"


def _format_problem(exc: BaseException, kind: Any) -> str:
    """cattrs' message for one refused value, in the user's words: ``expected a number, got
    the text 'abc'`` (see :func:`structure_strict`)."""
    said = str(exc)
    if kind is not None and isinstance(exc, (TypeError, ValueError, AttributeError)):
        got = f", {said}" if said.startswith("got ") else ""
        return f"expected {_type_words(kind)}{got}"
    return cattrs.v.format_exception(exc, kind)


CONVERTER = _strict_converter()


def structure_strict(data: dict[str, Any], cls: type, where: str, root: str = "") -> Any:
    """Structure ``data`` into attrs class ``cls`` or raise TrmError naming the key path.

    ``where`` names the origin (a file, ``--set``); ``root`` prefixes key paths
    (``data.generate``) for nested option tables.
    """
    try:
        return CONVERTER.structure(data, cls)
    except cattrs.ClassValidationError as exc:
        lines = cattrs.transform_error(exc, format_exception=_format_problem)
        problems = [_rewrite_path(line, root) for line in lines]
        raise TrmError(f"{where}: {'; '.join(problems)}") from exc


def structure_value(value: Any, kind: Any, where: str, key: str) -> Any:
    """One value as ``kind`` (``float``, ``int | None``) by the strict converter, or
    TrmError ``where: key: expected …, got …`` in :func:`structure_strict`'s words."""
    try:
        return CONVERTER.structure(value, kind)
    except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
        raise TrmError(f"{where}: {key}: {_format_problem(exc, kind)}") from None


def _rewrite_path(line: str, root: str) -> str:
    """Turn cattrs' ``msg @ $.a.b`` into ``a.b: msg`` (prefixed with ``root``)."""
    message, _, path = line.rpartition(" @ ")
    if not path:
        return line
    key = path.removeprefix("$").lstrip(".")
    key = ".".join(p for p in (root, key) if p)
    if message.startswith("extra fields found"):
        names = message.split("(", 1)[-1].rstrip(")")
        return f"unknown key(s) {names} in [{key or 'top level'}]; check the spelling"
    return f"{key}: {message}"


def load_spec(path: Path) -> RunSpec:
    """Read, structure and validate a TOML run spec."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TrmError(
            f"spec file {path} does not exist; give a path or a shipped spec name"
        ) from exc
    except IsADirectoryError as exc:
        raise TrmError(
            f"spec {path} is a directory; give a TOML file or a shipped spec name"
        ) from exc
    except UnicodeDecodeError as exc:
        raise TrmError(
            f"spec file {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from exc
    except OSError as exc:
        raise TrmError(f"cannot read spec file {path}: {exc.strerror}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TrmError(f"{path}: malformed TOML: {exc}") from exc
    raw.setdefault("name", path.stem)
    spec = structure_strict(raw, RunSpec, str(path))
    validate(spec, str(path))
    return spec


def spec_to_toml(spec: RunSpec) -> str:
    """The spec as TOML text that :func:`load_spec` reads back to an equal spec."""
    return tomli_w.dumps(CONVERTER.unstructure(spec))


def spec_to_dict(spec: RunSpec) -> dict[str, Any]:
    """Plain-data form of a spec (for JSON and checkpoints)."""
    return CONVERTER.unstructure(spec)


def spec_from_dict(data: dict[str, Any], where: str) -> RunSpec:
    """Inverse of :func:`spec_to_dict`, with the same strict checks as loading a file."""
    spec = structure_strict(data, RunSpec, where)
    validate(spec, where)
    return spec


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``--set section.key=value``; the value is read as a TOML value or a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise TrmError(f"--set {text!r}: expected KEY=VALUE, e.g. --set train.lr=3e-4")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def apply_overrides(spec: RunSpec, overrides: list[str]) -> RunSpec:
    """Apply ``--set`` overrides with the same type checks as the file; returns a new spec."""
    if not overrides:
        return spec
    data = spec_to_dict(spec)
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        node: Any = data
        if parts[0] == "plugins" and len(parts) >= 3 and isinstance(data.get("plugins"), dict):
            data["plugins"].setdefault(parts[1], {})  # --set plugins.NAME.KEY makes the table
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node, dict) or part not in node or not isinstance(node[part], dict):
                where = ".".join(parts[: depth + 1])
                raise TrmError(
                    f"--set {key}: there is no section [{where}]; "
                    f"sections are {', '.join(s for s in data if isinstance(data[s], dict))}"
                )
            node = node[part]
        leaf = parts[-1]
        if len(parts) == 1 and leaf != "name":
            raise TrmError(f"--set {key}: name a section and key, e.g. train.lr")
        is_open_table = parts[:2] == ["data", "generate"] or parts[0] == "plugins"
        if leaf not in node and not is_open_table:
            known = ", ".join(sorted(node))
            raise TrmError(f"--set {key}: unknown key {leaf!r}; known keys here: {known}")
        node[leaf] = value
    spec = structure_strict(data, RunSpec, "--set")
    validate(spec, "--set")
    return spec


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
        ("train.puzzle_emb_lr", t.puzzle_emb_lr, 0, 100, True),
        ("train.puzzle_emb_weight_decay", t.puzzle_emb_weight_decay, 0, 100, True),
        ("train.ema_rate", t.ema_rate, 0, 0.999999999, False),
        ("train.seed", t.seed, 0, MAX_SEED, True),
        ("train.eval_interval", t.eval_interval, 0, big, True),
        ("train.eval_max_examples", t.eval_max_examples, 0, big, True),
        ("train.checkpoint_interval_steps", t.checkpoint_interval_steps, 0, big, True),
        ("train.checkpoint_keep", t.checkpoint_keep, 1, 1000, True),
        ("data.prefetch_steps", spec.data.prefetch_steps, 0, 1024, True),
        ("runtime.threads", r.threads, 0, MAX_THREADS, True),
        ("runtime.micro_batch_size", r.micro_batch_size, 0, t.global_batch_size, True),
    ]


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
        a.puzzle_emb_ndim <= max(a.puzzle_emb_len, 1) * a.hidden_size,
        "arch.puzzle_emb_ndim",
        "must fit in puzzle_emb_len tokens of hidden_size",
    )
    need(t.max_steps > 0 or t.epochs > 0, "train.max_steps", "set max_steps or epochs above 0")
    need(t.optimizer in OPTIMIZERS, "train.optimizer", f"must be one of {OPTIMIZERS}")
    need(bool(d.source), "data.source", "name a data source, e.g. sudoku")
    for key, split in (("data.train_split", d.train_split), ("data.eval_split", d.eval_split)):
        need(bool(_SPLIT.match(split)), key, f"{split!r} must be a folder name (e.g. 'test')")
    need(d.reader in READERS, "data.reader", f"must be one of {READERS}")
    for name, table in spec.plugins.items():
        need(
            isinstance(table, dict),
            f"plugins.{name}",
            f"must be a table of the plugin's settings ([plugins.{name}]), got "
            f"{_value_words(table)}",
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


def shipped_spec_names() -> list[str]:
    """Names of the specs shipped with trm (``trm run quickstart``)."""
    from importlib import resources

    return sorted(
        p.name.removesuffix(".toml")
        for p in resources.files("trm.specs").iterdir()
        if p.name.endswith(".toml")
    )


def resolve_spec_path(name_or_path: str) -> Path:
    """A file path as given, or the path of a shipped spec of that name."""
    from importlib import resources

    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    candidate = resources.files("trm.specs") / f"{name_or_path}.toml"
    if candidate.is_file():
        return Path(str(candidate))
    raise TrmError(
        f"no spec file or shipped spec named {name_or_path!r}; "
        f"shipped specs: {', '.join(shipped_spec_names())}"
    )


__all__ = [
    "ArchSpec",
    "Change",
    "DataSpec",
    "RunSpec",
    "RuntimeSpec",
    "TrainSpec",
    "apply_overrides",
    "load_spec",
    "resolve_spec_path",
    "spec_from_dict",
    "spec_to_dict",
    "spec_to_toml",
    "structure_strict",
    "validate",
]
