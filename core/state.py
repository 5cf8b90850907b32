"""TrainState: everything a checkpoint must hold to continue a run exactly.

The loop owns and mutates one TrainState. ``state_dict()`` returns only tensors, numbers,
strings and containers of them, so checkpoints load with ``torch.load(weights_only=True)``.
``load_state_dict()`` refuses a payload whose architecture differs from the live model's,
listing every differing key. The RNG states come from :mod:`trm.device.rng`.
``weights_sha256`` is the canonical fingerprint of a model's weights that summary.json
records, so two runs can be compared bit for bit.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from attrs import define, field

from trm.data.shape import DatasetShape
from trm.device.compile import is_compiled
from trm.device.contract import HOST, DeviceBackend
from trm.device.rng import capture_rng, restore_rng
from trm.errors import TrmError
from trm.spec import RunSpec, spec_to_dict
from trm.version import __version__

MAX_LISTED_KEYS = 12


@define
class TrainState:
    """The live state of a run; see ``state_dict`` for what is saved.

    ``step`` counts finished optimizer steps; the sampler reads step ``step`` next, so
    ``step`` is also the data-order position and the lr-schedule position. ``best_step`` is
    the step of the best evaluation (0 before any): the highest ``best_value`` of the metric
    ``best_metric`` (the data source's primary metric, exact accuracy by default);
    ``best_exact_accuracy`` is that evaluation's exact accuracy. ``rank_parts`` is set on rank
    0 only while a data-parallel run saves: every rank's carry rows, RNG states and
    micro-batch, in rank order (see ``state_dict``).
    ``wall_s_before`` is the training wall time of the run up to its last checkpoint or end
    (the loop's stopwatch keeps it); ``checkpoint_step`` the step of the newest checkpoint
    written or resumed from (None: none yet; not saved). ``snapshot`` is set only on the copy
    of the state a background checkpoint write hands to ``save_checkpoint``: the payload
    taken on the host at the checkpoint's step, which ``state_dict`` then returns (the
    model and optimizers there are the live ones, already training on). ``backend`` carries
    out the device contract for the device the model is on (RNG states, host copies).
    """

    spec: RunSpec
    model: torch.nn.Module
    optimizers: list[Any]
    ema: Any | None
    carry: Any | None
    run_dir: Path
    total_steps: int
    step: int = 0
    samples: int = 0
    micro_batch_size: int = 0
    best_exact_accuracy: float = 0.0
    best_step: int = 0
    best_metric: str = "exact_accuracy"
    best_value: float = 0.0
    last_eval: dict[str, float] = field(factory=dict)
    wall_s_before: float = 0.0
    backend: DeviceBackend = HOST
    checkpoint_step: int | None = None
    data_dir: str = ""
    dataset_shape: DatasetShape | None = None
    # a multi-task mix's layout (trm.data.mix_layout.MixLayout.to_dict), for solving each task
    mix_layout: dict[str, Any] | None = None
    rank_parts: list[dict[str, Any]] | None = None
    snapshot: dict[str, Any] | None = None
    # torch's intra-op thread count the resumed checkpoint was written under (None: not resumed,
    # or a checkpoint that does not record it)
    checkpoint_threads: int | None = None
    # whether the resumed checkpoint's process ran the network compiled (None: not resumed,
    # or a checkpoint that does not record it)
    checkpoint_compiled: bool | None = None

    @property
    def device(self) -> torch.device:
        """The device the model's weights are on."""
        return next(self.model.parameters()).device

    def state_dict(self, fresh: bool = False) -> dict[str, Any]:
        """A weights-only-loadable payload of host tensors.

        Holds the model, optimizers (their param groups carry the lr), EMA, the ACT carry,
        every RNG state (Python, NumPy, torch CPU and the accelerator's), the position
        (step, samples, total_steps, data order), the micro-batch size, the recursion in
        force (``H_cycles``, ``L_cycles``, ``halt_exploration_prob``: the spec's unless a
        plugin's schedule changed them), whether activations are recomputed in backward
        (``activation_checkpointing``: memory-guard may have switched it on), the best
        evaluation, the resolved spec, the dataset shape and the trm version; ``device``, the
        device it trained on (a resume on another says so: trm.loop.device_failure);
        ``threads``, torch's intra-op thread count for the steps after it (sums split by thread
        count round differently, so a resume that means to be bit-identical goes on with it);
        ``world_size``, the number of processes that trained it. Under data parallelism
        (``rank_parts`` set) the carry is every rank's rows concatenated in rank order — the
        global carry, as one process holds it — and ``ranks`` lists each rank's RNG states
        and micro-batch size.

        With ``fresh`` every tensor is a host copy that later steps cannot change (a
        background write's snapshot), made once, straight from where the tensor lives: see
        :func:`tensors_to_host`. The carry's tensors are such copies either way
        (``TRMCarry.state_dict``).
        """
        if self.snapshot is not None:
            return self.snapshot
        train = self.spec.train
        carry = self.carry.state_dict() if self.carry is not None else None
        extra: dict[str, Any] = {"world_size": 1}
        if self.rank_parts is not None:
            carries = [part["carry"] for part in self.rank_parts]
            carry = None
            if all(c is not None for c in carries):
                carry = {key: torch.cat([c[key] for c in carries]) for key in carries[0]}
            extra = {
                "world_size": len(self.rank_parts),
                "ranks": [
                    {"rng": part["rng"], "micro_batch_size": part["micro_batch_size"]}
                    for part in self.rank_parts
                ],
            }
        payload = {
            "trm_version": __version__,
            "spec": spec_to_dict(self.spec),
            "model": self.model.state_dict(),
            "optimizers": [opt.state_dict() for opt in self.optimizers],
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "carry": None,  # below: its tensors are fresh host copies already
            "step": self.step,
            "samples": self.samples,
            "total_steps": self.total_steps,
            "data_position": {
                "next_step": self.step,
                "seed": train.seed,
                "global_batch_size": train.global_batch_size,
            },
            "micro_batch_size": self.micro_batch_size,
            "recursion": recursion_in_force(self.model),
            "activation_checkpointing": recomputes_activations(self.model),
            "best_exact_accuracy": self.best_exact_accuracy,
            "best_step": self.best_step,
            "best_metric": self.best_metric,
            "best_value": self.best_value,
            "last_eval": dict(self.last_eval),
            "wall_s": self.wall_s_before,
            "data_dir": self.data_dir,
            "dataset_shape": self.dataset_shape.to_dict() if self.dataset_shape else None,
            **({"mix_layout": self.mix_layout} if self.mix_layout is not None else {}),
            "rng": capture_rng(self.backend, self.device),
            "device": str(self.device),
            "threads": torch.get_num_threads(),
            "compiled": is_compiled(self.model),
            **extra,
        }
        payload = tensors_to_host(payload, self.backend, fresh)  # whatever the device
        payload["carry"] = tensors_to_host(carry, self.backend)
        return payload

    def load_state_dict(
        self, payload: dict[str, Any], where: str = "checkpoint", rng_said: bool = False
    ) -> list[str]:
        """Restore this state from a ``state_dict`` payload; returns warnings to show.

        Raises TrmError, listing the differing keys, when the payload's architecture, dataset
        shape or tensor shapes differ from this state's model. The carry stays where the
        payload holds it (the host): the caller takes this process's rows and moves only
        those to the device (``trm.loop.setup.resume``). Changed training settings are
        allowed (the run continues with the new ones) and come back as warnings, since the
        continuation is then no longer the run the checkpoint began. A payload without
        optimizer or RNG states (``trm import``'s) keeps this state's fresh optimizers and
        seeded RNGs, and says so in a warning.
        """
        check_compatible(self, payload, where)
        self.model.load_state_dict(payload["model"])
        notes = []
        if payload.get("optimizers") is None:  # an imported checkpoint (trm import)
            notes.append(
                f"{where} holds no optimizer state (imported weights: the reference saves "
                f"none); the optimizers start fresh at step {payload['step']}"
            )
        else:
            for opt, opt_state in zip(self.optimizers, payload["optimizers"], strict=True):
                opt.load_state_dict(opt_state)
        if self.ema is not None and payload.get("ema") is not None:
            self.ema.load_state_dict(payload["ema"])
        if payload.get("carry") is not None:  # left on the host: see the docstring
            from trm.model import TRMCarry

            self.carry = TRMCarry.from_state_dict(payload["carry"])
        self.step = int(payload["step"])
        self.samples = int(payload["samples"])
        self.micro_batch_size = int(payload.get("micro_batch_size") or self.micro_batch_size)
        restore_recursion(self.model, payload)
        restore_activation_checkpointing(self.model, payload, self.spec)
        self.best_exact_accuracy = float(payload.get("best_exact_accuracy", 0.0))
        self.best_step = int(payload.get("best_step", 0))
        self.best_metric = str(payload.get("best_metric", "exact_accuracy"))
        self.best_value = float(payload.get("best_value", self.best_exact_accuracy))
        self.last_eval = dict(payload.get("last_eval") or {})
        self.wall_s_before = float(payload.get("wall_s", 0.0))
        threads = payload.get("threads")
        recorded = isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1
        self.checkpoint_threads = threads if recorded else None
        compiled = payload.get("compiled")
        self.checkpoint_compiled = compiled if isinstance(compiled, bool) else None
        rng_note = ""
        if payload.get("rng") is not None:  # an imported checkpoint keeps the seeded RNGs
            rng_note = restore_rng(payload["rng"], self.backend, self.device)
        notes += [
            f"{where}: {key} was {old!r}, now {new!r}; the continuation differs from the "
            "original run"
            for section in ("train", "plugins")
            for key, old, new in spec_differences(payload["spec"], spec_to_dict(self.spec), section)
        ]
        if rng_note and not rng_said:  # rng_said: the caller tells the user itself
            notes.append(f"{where}: {rng_note}")
        if payload.get("trm_version") != __version__:
            notes.append(
                f"{where} was written by trm {payload.get('trm_version')}, "
                f"this is trm {__version__}"
            )
        return notes


def tensors_to_host(value: Any, backend: DeviceBackend, fresh: bool = False) -> Any:
    """``value`` (nested dicts, lists, tuples) with every tensor on the host, through
    ``backend.to_host``: a checkpoint holds host tensors whatever the device.

    ``backend.to_host`` copies a device's tensor and leaves a host tensor as it is; with
    ``fresh`` a tensor it left sharing memory with the original is cloned, so each tensor
    comes back as a new host tensor in exactly one copy.
    """
    if isinstance(value, torch.Tensor):
        host = backend.to_host(value)
        if fresh and _shares_memory(host, value):
            host = host.clone()
        return host
    if isinstance(value, dict):
        return {k: tensors_to_host(v, backend, fresh) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(tensors_to_host(v, backend, fresh) for v in value)
    return value


def _shares_memory(host: torch.Tensor, original: torch.Tensor) -> bool:
    """Whether ``host`` is (a view of) ``original``'s memory: both on the host, one storage."""
    return (
        host.device == original.device
        and host.untyped_storage().data_ptr() == original.untyped_storage().data_ptr()
    )


def recursion_in_force(model: torch.nn.Module) -> dict[str, Any] | None:
    """The model's recursion in force (``recursion_in_force()``), None for a model without."""
    read = getattr(model, "recursion_in_force", None)
    return read() if callable(read) else None


def restore_recursion(model: torch.nn.Module, payload: dict[str, Any]) -> None:
    """Give ``model`` the recursion in force a checkpoint recorded (checkpoints written
    before it was recorded, or by a model without it, leave the spec's values)."""
    saved = payload.get("recursion")
    setter = getattr(model, "set_recursion", None)
    if saved and callable(setter):
        setter(
            H_cycles=int(saved["H_cycles"]),
            L_cycles=int(saved["L_cycles"]),
            halt_exploration_prob=float(saved["halt_exploration_prob"]),
        )


def recomputes_activations(model: torch.nn.Module) -> bool:
    """Whether ``model`` recomputes its activations in backward (False for a model without
    activation checkpointing)."""
    return bool(getattr(model, "activation_checkpointing", False))


def restore_activation_checkpointing(
    model: torch.nn.Module, payload: dict[str, Any], spec: RunSpec
) -> None:
    """Give ``model`` the activation checkpointing a checkpoint recorded, where the spec
    leaves it to trm (``runtime.activation_checkpointing = "auto"``: memory-guard may have
    switched it on during the run); an explicit "on" or "off" in the spec wins."""
    saved = payload.get("activation_checkpointing")
    setter = getattr(model, "set_activation_checkpointing", None)
    if saved is not None and callable(setter) and spec.runtime.activation_checkpointing == "auto":
        setter(bool(saved))


def last_good(state: TrainState) -> str:
    """Which checkpoint of the run survives, in words, for messages about a failure."""
    if state.checkpoint_step is None:
        return "no checkpoint of this run was written yet"
    return f"the checkpoint of step {state.checkpoint_step} is intact"


def spec_differences(
    old: dict[str, Any], new: dict[str, Any], section: str
) -> list[tuple[str, Any, Any]]:
    """``(key_path, old, new)`` for every value of ``section`` that differs."""
    a, b = old.get(section) or {}, new.get(section) or {}
    return [
        (f"{section}.{key}", a.get(key), b.get(key))
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


def check_compatible(state: TrainState, payload: dict[str, Any], where: str) -> None:
    """Raise TrmError listing what differs when ``payload`` cannot load into ``state``."""
    problems = [
        f"{key}: {old!r} in the checkpoint, {new!r} here"
        for key, old, new in spec_differences(payload["spec"], spec_to_dict(state.spec), "arch")
    ]
    if state.dataset_shape is not None:
        try:
            saved = DatasetShape.from_dict(dict(payload.get("dataset_shape") or {}))
        except TrmError as exc:
            problems.append(f"dataset: {exc}")
        else:
            problems += [
                f"dataset {key}: {old} in the checkpoint, {new} here"
                for key, old, new in saved.model_differences(state.dataset_shape)
            ]
    problems += tensor_differences(payload["model"], state.model.state_dict())
    if not problems:
        return
    shown = problems[:MAX_LISTED_KEYS]
    if len(problems) > len(shown):
        shown.append(f"… and {len(problems) - len(shown)} more")
    raise TrmError(
        f"{where} does not fit this run's architecture: {'; '.join(shown)}. "
        "Resume with the spec the checkpoint was trained with, or start afresh with "
        "--resume never (or another --out)"
    )


def tensor_differences(saved: dict[str, Any], live: dict[str, torch.Tensor]) -> list[str]:
    """Keys missing, unexpected or of another shape in ``saved`` versus ``live``."""
    problems = [f"model key {k} missing in the checkpoint" for k in sorted(set(live) - set(saved))]
    problems += [f"model key {k} not in this model" for k in sorted(set(saved) - set(live))]
    for key in sorted(set(saved) & set(live)):
        old, new = tuple(saved[key].shape), tuple(live[key].shape)
        if old != new:
            problems.append(
                f"model key {key}: shape {list(old)} in the checkpoint, {list(new)} here"
            )
    return problems


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over the model state in sorted key order: name, dtype, shape, then raw bytes."""
    digest = hashlib.sha256()
    state = model.state_dict()
    for key in sorted(state):
        tensor = state[key].detach().cpu().contiguous()
        digest.update(key.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
