"""The reference's ``all_config.yaml`` and a trm run spec, each made from the other.

The reference's pretrain.py dumps its whole config (``yaml.dump(config.model_dump())``)
beside its checkpoints. :func:`spec_from_reference` maps every key of it: onto a spec key, or
as bookkeeping that does not change the weights or how they evaluate (run names, paths,
how often the reference evaluated or saved: listed in the import's record), or refuses it by
name when trm cannot honour it (another architecture or loss, a frozen network, a second
dataset, a key this version does not know). :func:`reference_config` writes the reverse for
``trm export``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml
from attrs import frozen

from trm.data.shape import DatasetShape
from trm.errors import TrmError
from trm.spec import RunSpec, structure_strict, structure_value, validate

CONFIG_FILE = "all_config.yaml"
ARCH_NAME = "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1"
LOSS_HEAD = "losses@ACTLossHead"
LOSS_TYPES = {"stablemax_cross_entropy": "stablemax", "softmax_cross_entropy": "softmax"}
ARC_EVALUATOR = "arc@ARC"
# forward_dtype -> runtime.precision. bfloat16 (the reference's default, on CUDA) becomes
# trm's auto: bf16 where the backend computes it, float32 on a CPU without it.
PRECISIONS = {"bfloat16": "auto", "float32": "fp32", "float16": "fp16"}
FORWARD_DTYPES = {"auto": "bfloat16", "bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}

# [arch] keys with the same name and meaning in both
ARCH_SAME = (
    "H_cycles",
    "L_cycles",
    "L_layers",
    "hidden_size",
    "expansion",
    "num_heads",
    "pos_encodings",
    "mlp_t",
    "puzzle_emb_ndim",
    "puzzle_emb_len",
    "halt_max_steps",
    "halt_exploration_prob",
    "no_ACT_continue",
    "rms_norm_eps",
    "rope_theta",
)
# the reference's model config has no default for these
ARCH_REQUIRED = (
    "H_cycles",
    "L_cycles",
    "L_layers",
    "hidden_size",
    "expansion",
    "num_heads",
    "pos_encodings",
    "halt_max_steps",
    "halt_exploration_prob",
)
# the reference's defaults for the model keys a config may leave out
ARCH_DEFAULTS = {
    "mlp_t": False,
    "puzzle_emb_ndim": 0,
    "puzzle_emb_len": 16,
    "no_ACT_continue": True,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}
# top-level keys with the same name and meaning in [train]
TRAIN_SAME = (
    "global_batch_size",
    "lr",
    "lr_min_ratio",
    "lr_warmup_steps",
    "weight_decay",
    "beta1",
    "beta2",
    "puzzle_emb_lr",
    "puzzle_emb_weight_decay",
    "ema",
    "ema_rate",
    "seed",
)
# keys that describe the reference's own bookkeeping, not the weights or their evaluation
BOOKKEEPING = {
    "project_name": "a W&B project name",
    "run_name": "a W&B run name (the run is named after it)",
    "checkpoint_path": "where the reference saved",
    "load_checkpoint": "what that run started from",
    "checkpoint_every_eval": "when the reference saved",
    "min_eval_interval": "when the reference began evaluating",
    "eval_save_outputs": "which outputs the reference saved to files",
    "H_layers": "unused by the reference's TRM",
}
_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")


@frozen
class MappedConfig:
    """A reference config mapped onto trm: ``spec``; ``ignored`` lists (key, why) for the
    bookkeeping keys; ``data_paths`` the datasets it names (unresolved)."""

    spec: RunSpec
    ignored: tuple[tuple[str, str], ...]
    data_paths: tuple[str, ...]


def read_config(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; TrmError when it is missing or not such a mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TrmError(
            f"config {path} does not exist; give the all_config.yaml saved beside the "
            "checkpoint with --config FILE"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrmError(f"config {path} cannot be read ({exc}); give a YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0]
        raise TrmError(f"config {path} is not valid YAML ({first})") from None
    if not isinstance(data, dict) or not isinstance(data.get("arch"), dict):
        raise TrmError(
            f"config {path} is not a reference all_config.yaml (no 'arch' table); give the "
            "one saved beside the checkpoint with --config FILE"
        )
    return data


def _refuse(where: Path, key: str, why: str) -> TrmError:
    return TrmError(f"config {where}: {key}: {why}")


def _typed(value: Any, kind: Any, where: Path, key: str) -> Any:
    """``value`` as ``kind``; TrmError in the words of trm's spec reader otherwise."""
    return structure_value(value, kind, f"config {where}", key)


def _unknown(table: dict[Any, Any], known: set[str]) -> list[str]:
    """The keys of ``table`` outside ``known``, as text, sorted (YAML allows numeric keys)."""
    return sorted(str(k) for k in table if k not in known)


def _arch(arch: dict[str, Any], where: Path) -> tuple[dict[str, Any], str]:
    """The [arch] table of the spec and the runtime precision, from the reference's arch."""
    name = arch.get("name")
    if name != ARCH_NAME:
        raise _refuse(
            where,
            "arch.name",
            f"{name!r} is not an architecture trm runs; trm imports {ARCH_NAME} only",
        )
    loss = arch.get("loss")
    if not isinstance(loss, dict) or loss.get("name") != LOSS_HEAD:
        found = loss.get("name") if isinstance(loss, dict) else loss
        raise _refuse(where, "arch.loss.name", f"{found!r} is not {LOSS_HEAD}, the loss trm has")
    loss_type = _typed(
        loss.get("loss_type", "softmax_cross_entropy"), str, where, "arch.loss.loss_type"
    )
    if loss_type not in LOSS_TYPES:
        raise _refuse(
            where, "arch.loss.loss_type", f"{loss_type!r}: trm has {', '.join(LOSS_TYPES)}"
        )
    extra_loss = _unknown(loss, {"name", "loss_type"})
    if extra_loss:
        raise _refuse(where, f"arch.loss.{extra_loss[0]}", "trm's loss has no such setting")
    missing = [k for k in ARCH_REQUIRED if k not in arch]
    if missing:
        raise _refuse(where, f"arch.{missing[0]}", "missing (the reference requires it)")
    known = {"name", "loss", "forward_dtype", "H_layers", *ARCH_SAME}
    unknown = _unknown(arch, known)
    if unknown:
        raise _refuse(
            where, f"arch.{unknown[0]}", "trm cannot honour this key (not in the reference's TRM)"
        )
    dtype = _typed(arch.get("forward_dtype", "bfloat16"), str, where, "arch.forward_dtype")
    if dtype not in PRECISIONS:
        raise _refuse(where, "arch.forward_dtype", f"{dtype!r}: trm runs {', '.join(PRECISIONS)}")
    table = {k: arch.get(k, ARCH_DEFAULTS.get(k)) for k in ARCH_SAME}
    table["loss"] = LOSS_TYPES[loss_type]
    return table, PRECISIONS[dtype]


def _evaluator(config: dict[str, Any], where: Path) -> tuple[str | None, bool]:
    """The data source the evaluators name (arc or None) and the ARC vote's pooling. An
    evaluator is its name (``arc@ARC``) or a table with ``name`` and its settings."""
    evaluators = config.get("evaluators") or []
    if not isinstance(evaluators, list):
        raise _refuse(where, "evaluators", "must be a list")
    source, pool = None, False
    for entry in evaluators:
        settings = entry if isinstance(entry, dict) else {"name": entry}
        name = settings.get("name")
        if name != ARC_EVALUATOR:
            raise _refuse(where, "evaluators", f"{name!r}: trm has the {ARC_EVALUATOR} evaluator")
        extra = _unknown(settings, {"name", "aggregated_voting"})
        if extra:
            raise _refuse(where, f"evaluators.{extra[0]}", "trm's ARC vote has no such setting")
        voting = settings.get("aggregated_voting", True)
        source, pool = "arc", _typed(voting, bool, where, "evaluators.aggregated_voting")
    return source, pool


def _run_name(config: dict[str, Any], fallback: str) -> str:
    raw = str(config.get("run_name") or fallback)
    name = _NAME_CHARACTERS.sub("-", raw).strip("-._")[:100]
    return name or "imported"


def spec_from_reference(
    config: dict[str, Any],
    where: Path,
    data_dir: str,
    source: str | None,
    shape: DatasetShape | None,
    fallback_name: str,
) -> MappedConfig:
    """Map the reference ``config`` (read from ``where``) onto a trm spec training on
    ``data_dir`` with data source ``source`` (None: the evaluators' source, else sudoku).

    ``shape`` (the dataset's train split) converts the reference's ``eval_interval``, counted
    in epochs, to trm's steps. TrmError naming the key for anything trm cannot honour.
    """
    arch, precision = _arch(config["arch"], where)
    evaluated_source, pool = _evaluator(config, where)
    known = {
        "arch",
        "data_paths",
        "data_paths_test",
        "evaluators",
        "epochs",
        "eval_interval",
        "freeze_weights",
        *TRAIN_SAME,
        *BOOKKEEPING,
    }
    unknown = _unknown(config, known)
    if unknown:
        raise _refuse(
            where, unknown[0], "trm cannot honour this key (not in the reference's pretrain.py)"
        )
    if _typed(config.get("freeze_weights") or False, bool, where, "freeze_weights"):
        raise _refuse(where, "freeze_weights", "trm cannot train the puzzle table alone")
    if config.get("data_paths_test"):
        raise _refuse(
            where,
            "data_paths_test",
            "trm evaluates the test split of the training dataset; leave it empty",
        )
    paths = config.get("data_paths") or []
    if not isinstance(paths, list) or len(paths) > 1:
        raise _refuse(where, "data_paths", "trm trains on one dataset folder; give one")
    missing = [k for k in ("global_batch_size", "epochs", "lr") if k not in config]
    if missing:
        raise _refuse(where, missing[0], "missing (the reference requires it)")
    train = {k: config[k] for k in TRAIN_SAME if k in config}
    train["epochs"] = _typed(config["epochs"], float, where, "epochs")
    train["eval_pool"] = pool
    interval = _typed(config.get("eval_interval"), int | None, where, "eval_interval")
    if interval is not None and interval < 1:
        raise _refuse(
            where,
            "eval_interval",
            f"must be at least 1 (epochs between evaluations), got {interval}; or null",
        )
    batch = _typed(config["global_batch_size"], int, where, "global_batch_size")
    if interval and shape is not None and batch >= 1:  # a batch below 1 is refused below
        rows = interval * max(shape.rows_per_epoch, 1)
        train["eval_interval"] = max(1, math.ceil(rows / batch))
    table = {
        "name": _run_name(config, fallback_name),
        "arch": arch,
        "train": train,
        "data": {"source": source or evaluated_source or "sudoku", "dir": data_dir},
        "runtime": {"precision": precision},
    }
    spec = structure_strict(table, RunSpec, f"config {where} (mapped to a trm spec)")
    validate(spec, f"config {where} (mapped to a trm spec)")
    ignored = tuple(
        (key, why) for key, why in BOOKKEEPING.items() if config.get(key) not in (None, [], 0)
    )
    if interval and shape is None:
        ignored += (("eval_interval", "no dataset to convert its epochs to steps"),)
    return MappedConfig(spec, ignored, tuple(str(p) for p in paths))


@frozen
class ExportedConfig:
    """A spec as the reference's config: ``config`` (the all_config.yaml mapping) and the
    ``notes`` on what the reference cannot express or what export changed."""

    config: dict[str, Any]
    notes: tuple[str, ...]


def reference_config(
    spec: RunSpec, data_dir: str, epoch_rows: int, checkpoint_file: str
) -> ExportedConfig:
    """The reference's all_config.yaml for ``spec`` trained on ``data_dir`` (whose train
    split reads ``epoch_rows`` examples an epoch), resuming from ``checkpoint_file``.

    The quickstart's ``puzzle_emb_ndim = 0`` with a prefix (``puzzle_emb_len > 0``) keeps a
    zero prefix position in trm that the reference cannot build (it allocates the prefix but
    adds no embedding, and crashes); it is written as the equivalent the reference builds: a
    puzzle table of ``hidden_size`` zeros a row that never learns (``puzzle_emb_lr`` and its
    weight decay 0). See :func:`needs_zero_table`.
    """
    a, t = spec.arch, spec.train
    if a.attention_window > 0:
        raise TrmError(
            f"arch.attention_window = {a.attention_window}: the reference implementation has "
            "dense attention only, so this run's network cannot be exported in its format"
        )
    if a.swiglu_norm:
        raise TrmError(
            "arch.swiglu_norm = true: the reference implementation has the plain SwiGLU "
            "only, so this run's network cannot be exported in its format"
        )
    notes: list[str] = []
    arch: dict[str, Any] = {
        "name": ARCH_NAME,
        "loss": {"name": LOSS_HEAD, "loss_type": f"{a.loss}_cross_entropy"},
        "H_layers": 0,
        "forward_dtype": FORWARD_DTYPES.get(spec.runtime.precision, "bfloat16"),
        **{k: getattr(a, k) for k in ARCH_SAME},
    }
    puzzle_emb_lr, puzzle_emb_weight_decay = t.puzzle_emb_lr, t.puzzle_emb_weight_decay
    if needs_zero_table(spec):
        arch["puzzle_emb_ndim"] = a.hidden_size
        puzzle_emb_lr = puzzle_emb_weight_decay = 0.0
        notes.append(
            f"puzzle_emb_ndim = 0 with puzzle_emb_len = {a.puzzle_emb_len}: trm keeps a zero "
            "prefix position that the reference cannot build (it adds no puzzle embedding and "
            f"crashes), so the export holds the equivalent: a puzzle table of {a.hidden_size} "
            "zeros a row, puzzle_emb_lr = 0 and puzzle_emb_weight_decay = 0 (it stays zero)"
        )
    epochs = t.epochs
    if t.max_steps > 0:
        epochs = t.max_steps * t.global_batch_size / max(epoch_rows, 1)
        notes.append(f"train.max_steps = {t.max_steps} is written as epochs = {math.ceil(epochs)}")
    if t.optimizer != "adam_atan2":
        notes.append(f"train.optimizer = {t.optimizer!r}: the reference trains with AdamATan2")
    config: dict[str, Any] = {
        "arch": arch,
        "beta1": t.beta1,
        "beta2": t.beta2,
        "checkpoint_every_eval": False,
        "checkpoint_path": None,
        "data_paths": [data_dir],
        "data_paths_test": [],
        "ema": t.ema,
        "ema_rate": t.ema_rate,
        "epochs": max(1, math.ceil(epochs)),
        "eval_interval": None,
        "eval_save_outputs": [],
        "evaluators": [{"name": ARC_EVALUATOR}] if spec.data.source == "arc" else [],
        "freeze_weights": False,
        "global_batch_size": t.global_batch_size,
        "load_checkpoint": checkpoint_file,
        "lr": t.lr,
        "lr_min_ratio": t.lr_min_ratio,
        "lr_warmup_steps": t.lr_warmup_steps,
        "min_eval_interval": 0,
        "project_name": None,
        "puzzle_emb_lr": puzzle_emb_lr,
        "puzzle_emb_weight_decay": puzzle_emb_weight_decay,
        "run_name": spec.name,
        "seed": t.seed,
        "weight_decay": t.weight_decay,
    }
    return ExportedConfig(config, tuple(notes))


def needs_zero_table(spec: RunSpec) -> bool:
    """True for a spec with a prefix position but no puzzle embedding (see
    :func:`reference_config`)."""
    return spec.arch.puzzle_emb_ndim == 0 and spec.arch.puzzle_emb_len > 0


def write_config(config: dict[str, Any], path: Path) -> None:
    """``config`` as YAML, keys sorted, in the block style the reference's dump writes."""
    path.write_text(yaml.safe_dump(config, sort_keys=True), encoding="utf-8")
