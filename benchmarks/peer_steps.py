"""The peers' training steps, built beside trm's for ``benchmarks/peers.py`` and
``benchmarks/time_to_accuracy.py``: each peer is driven the way its own code drives it.

- the official TinyRecursiveModels (SamsungSAILMontreal), imported at run time from a checkout
  the user names; nothing of it is copied into trm. Its model and ACT loss head are built
  from trm's spec through :func:`trm.plugins.formats.reference_config.reference_config` (the
  all_config.yaml trm exports for the reference), compiled with ``torch.compile`` as its
  ``pretrain.py`` does unless ``DISABLE_COMPILE`` is set, in its own ``forward_dtype``
  (bfloat16), and stepped as ``pretrain.train_batch`` steps it: the carry, loss / global
  batch, backward, each optimizer's learning rate, step and zero_grad, the metrics reduced
  to the host, then ``EMAHelper.update`` when the spec keeps an EMA. Its CUDA-only
  ``AdamATan2`` (the ``adam-atan2`` extension) is replaced by ``torch.optim.AdamW`` with the
  same betas and weight decay; its sparse sign-SGD puzzle-embedding optimizer is its own.
- lucidrains' ``tiny-recursive-model`` (PyPI), at the configuration closest to the spec that
  it offers (:func:`lucidrains_config` says what differs), stepped as its ``Trainer`` steps:
  one call on (inputs, outputs, latents, labels), backward of the summed loss, AdamW step,
  zero_grad; outputs and latents carried to the next step. It ships no compile and no mixed
  precision, so it runs eager in fp32. Its trainer drops halted rows from the batch; here the
  batch is kept whole, so every step trains the same number of samples as the others.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from attrs import frozen

from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex, TrainSampler
from trm.plugins.formats.reference_config import reference_config
from trm.spec import RunSpec

# The modules of the official checkout that peers import (their top-level package names).
OFFICIAL_MODULES = (
    "models.recursive_reasoning.trm",
    "models.losses",
    "models.sparse_embedding",
    "models.ema",
)
OFFICIAL_OPTIMIZER_NOTE = (
    "AdamW in place of the official AdamATan2 (a CUDA-only extension): same betas and weight decay"
)


@frozen
class PeerStep:
    """One peer ready to train: ``step()`` runs one optimizer step of ``batch_size`` samples
    and returns its loss as a float (which waits for the device); ``flops_per_sample`` is
    what one sample costs it (forward + backward), ``precision`` and ``compiled`` how it runs,
    ``notes`` how it differs from trm's configuration, one line each."""

    name: str
    step: Callable[[], float]
    batch_size: int
    flops_per_sample: float
    precision: str
    compiled: bool
    notes: tuple[str, ...]
    model: Any = None
    ema: Any = None


class Batches:
    """trm's training batches of ``data_dir``'s train split in trm's sampling order, as
    tensors on ``device``. With ``count``, ``next()`` cycles through that many steps gathered
    up front (a timed step then reads no data); with None it gathers each step as it comes."""

    def __init__(
        self,
        spec: RunSpec,
        data_dir: Path,
        batch_size: int,
        device: str,
        count: int | None = 8,
    ) -> None:
        self.index = SplitIndex(open_split(data_dir / spec.data.train_split))
        self.sampler = TrainSampler(self.index, batch_size, spec.train.seed)
        self.batch_size, self.device = batch_size, device
        self.steps = [self.gather(s) for s in range(count)] if count else []
        self.position = 0

    def gather(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.index.gather(self.sampler.examples_for_step(step))
        return {
            k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in rows.items()
        }

    def first(self) -> dict[str, torch.Tensor]:
        return self.steps[0] if self.steps else self.gather(0)

    def next(self) -> dict[str, torch.Tensor]:
        if self.steps:
            batch = self.steps[self.position % len(self.steps)]
        else:
            batch = self.gather(self.position)
        self.position += 1
        return batch


# ---------------------------------------------------------------------------- official


def import_official(reference: Path) -> dict[str, Any]:
    """The official checkout's modules, imported from ``reference`` (put first on sys.path).

    Raises ImportError naming what is missing (its ``models`` package, or a package it
    needs such as pydantic or einops: ``pip install -e '.[peers]'``)."""
    reference = reference.resolve()
    if not (reference / "models" / "recursive_reasoning" / "trm.py").exists():
        raise ImportError(f"{reference} holds no models/recursive_reasoning/trm.py")
    if str(reference) not in sys.path:
        sys.path.insert(0, str(reference))
    return {name: importlib.import_module(name) for name in OFFICIAL_MODULES}


def official_model_config(spec: RunSpec, shape: Any, batch_size: int) -> tuple[dict, dict]:
    """``(model config, train config)``: the official model's constructor mapping for
    ``spec`` on a data set of ``shape`` at ``batch_size`` rows, and the all_config.yaml
    mapping trm exports for the reference (optimizer settings, EMA)."""
    exported = reference_config(spec, "data", 1, None).config
    arch = {k: v for k, v in exported["arch"].items() if k not in ("name", "loss")}
    model_cfg = {
        **arch,
        "batch_size": batch_size,
        "vocab_size": shape.vocab_size,
        "seq_len": shape.seq_len,
        "num_puzzle_identifiers": shape.num_puzzle_identifiers,
        "causal": False,
    }
    return model_cfg, exported


def official_step(
    reference: Path,
    spec: RunSpec,
    shape: Any,
    batches: Batches,
    device: str,
    total_steps: int,
    compile_model: bool = True,
    forward_dtype: str | None = None,
) -> PeerStep:
    """The official model and loss head, its optimizers and EMA, stepped as ``pretrain.py``
    steps them (see the module docstring); the learning rate follows its cosine schedule
    with warm-up over ``total_steps``. ``forward_dtype`` (``"float32"``) replaces its
    configuration's ``arch.forward_dtype`` (bfloat16 as it ships), as a user of the official
    code would set it on a CPU without native bf16 arithmetic; the peer is then named
    ``official-fp32``."""
    from trm.measure.flops import model_flops

    mods = import_official(reference)
    model_cfg, config = official_model_config(spec, shape, batches.batch_size)
    if forward_dtype is not None:
        model_cfg["forward_dtype"] = forward_dtype
    torch.manual_seed(config["seed"])
    with torch.device(device):
        inner = mods["models.recursive_reasoning.trm"].TinyRecursiveReasoningModel_ACTV1(model_cfg)
        loss_type = config["arch"]["loss"]["loss_type"]
        model = mods["models.losses"].ACTLossHead(inner, loss_type=loss_type)
        compiled = compile_model and "DISABLE_COMPILE" not in os.environ
        if compiled:
            model = torch.compile(model)
    betas = (config["beta1"], config["beta2"])
    adamw = torch.optim.AdamW(
        model.parameters(), lr=0.0, weight_decay=config["weight_decay"], betas=betas
    )
    if model_cfg["puzzle_emb_ndim"] == 0:
        optimizers, base_lrs = [adamw], [config["lr"]]
    else:
        sign_sgd = mods["models.sparse_embedding"].CastedSparseEmbeddingSignSGD_Distributed(
            model.model.puzzle_emb.buffers(),
            lr=0.0,
            weight_decay=config["puzzle_emb_weight_decay"],
            world_size=1,
        )
        optimizers, base_lrs = [sign_sgd, adamw], [config["puzzle_emb_lr"], config["lr"]]
    ema = None
    if config["ema"]:
        ema = mods["models.ema"].EMAHelper(mu=config["ema_rate"])
        ema.register(model)
    global_batch = batches.batch_size
    state: dict[str, Any] = {"carry": None, "step": 0}

    def lr_at(step: int, base_lr: float) -> float:  # the official cosine with warm-up
        warmup = round(config["lr_warmup_steps"])
        if step < warmup:
            return base_lr * step / max(1, warmup)
        progress = (step - warmup) / max(1, total_steps - warmup)
        ratio = config["lr_min_ratio"]
        return base_lr * (ratio + max(0.0, (1 - ratio) * 0.5 * (1 + math.cos(math.pi * progress))))

    def step() -> float:
        state["step"] += 1
        batch = batches.next()
        if state["carry"] is None:
            with torch.device(device):
                state["carry"] = model.initial_carry(batch)
        state["carry"], loss, metrics, _, _ = model(
            carry=state["carry"], batch=batch, return_keys=[]
        )
        ((1 / global_batch) * loss).backward()
        for optimizer, base_lr in zip(optimizers, base_lrs, strict=True):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(state["step"], base_lr)
            optimizer.step()
            optimizer.zero_grad()
        keys = sorted(metrics)
        torch.stack([metrics[k] for k in keys]).cpu().numpy()  # as train_batch reduces them
        if ema is not None:
            ema.update(model)
        return float(loss.detach())

    flops = model_flops(spec.arch, shape.seq_len, shape.vocab_size).per_sample
    notes = [OFFICIAL_OPTIMIZER_NOTE]
    if forward_dtype is not None:
        notes.append(f"arch.forward_dtype = {forward_dtype} (the official config's own setting)")
    if not compiled:
        notes.append("not compiled (DISABLE_COMPILE set, or asked)")
    precision = model_cfg["forward_dtype"].replace("bfloat16", "bf16").replace("float32", "fp32")
    return PeerStep(
        name="official" if forward_dtype is None else f"official-{precision}",
        step=step,
        batch_size=global_batch,
        flops_per_sample=float(flops),
        precision=precision,
        compiled=compiled,
        notes=tuple(notes),
        model=model,
        ema=ema,
    )


# ---------------------------------------------------------------------------- lucidrains


def lucidrains_config(spec: RunSpec, shape: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The closest configuration ``tiny-recursive-model`` offers for ``spec``: its model's
    keyword arguments (``network`` described, not built) and the differences, one line each.
    """
    a = spec.arch
    prefix = a.puzzle_emb_len if a.puzzle_emb_len > 0 else 0
    tokens = shape.seq_len + prefix
    model = {
        "dim": a.hidden_size,
        "num_tokens": shape.vocab_size,
        "num_refinement_blocks": a.H_cycles,
        "num_latent_refinements": a.L_cycles,
        "num_register_tokens": prefix,
    }
    inner = 256 * math.ceil(round(a.expansion * a.hidden_size * 2 / 3) / 256)
    notes = [
        f"{prefix} learned register tokens in place of the puzzle-embedding prefix",
        "no puzzle embedding, no Q-learning halting head: one mean-pooled halt logit, BCE on "
        "'all cells right'; plain cross-entropy, not stablemax",
        "fp32 eager (it ships no compile and no mixed precision); AdamW, as its Trainer",
        "the batch kept whole (its Trainer drops halted rows)",
    ]
    if a.mlp_t:
        token_inner = 256 * math.ceil(round(a.expansion * tokens * 2 / 3) / 256)
        model["network"] = {
            "kind": "MLPMixer1D",
            "dim": a.hidden_size,
            "depth": a.L_layers,
            "seq_len": tokens,
            "expansion_factor": token_inner / a.hidden_size,
            "expansion_factor_token": inner / a.hidden_size,
        }
        notes.append(
            f"network MLPMixer1D depth {a.L_layers}: pre-norm LayerNorm and GELU MLPs (token "
            f"mixing {tokens}->{token_inner}, channels {a.hidden_size}->{inner}) where TRM has "
            "post-norm RMSNorm and SwiGLU"
        )
    else:
        model["network"] = {
            "kind": "x_transformers.Encoder",
            "dim": a.hidden_size,
            "depth": a.L_layers,
            "heads": a.num_heads,
            "attn_dim_head": a.hidden_size // a.num_heads,
            "ff_mult": inner / a.hidden_size,
            "ff_glu": True,
            "ff_swish": True,
            "rotary_pos_emb": a.pos_encodings == "rope",
            "use_rmsnorm": True,
        }
        notes.append(
            f"network x_transformers Encoder depth {a.L_layers}, {a.num_heads} heads, SwiGLU "
            f"{a.hidden_size}->{inner}, RMSNorm, rotary: pre-norm where TRM is post-norm"
        )
    return model, tuple(notes)


def build_lucidrains(config: dict[str, Any]) -> torch.nn.Module:
    """lucidrains' ``TinyRecursiveModel`` of ``config`` (see :func:`lucidrains_config`)."""
    from tiny_recursive_model import MLPMixer1D, TinyRecursiveModel

    net = dict(config["network"])
    kind = net.pop("kind")
    if kind == "MLPMixer1D":
        network = MLPMixer1D(**net)
    else:
        from x_transformers import Encoder

        network = Encoder(**net)
    return TinyRecursiveModel(**{**config, "network": network})


def lucidrains_step(
    spec: RunSpec, shape: Any, batches: Batches, device: str, lr: float = 1e-4
) -> PeerStep:
    """lucidrains' model at :func:`lucidrains_config`, stepped as its Trainer steps it."""
    from torch.utils.flop_counter import FlopCounterMode

    config, notes = lucidrains_config(spec, shape)
    torch.manual_seed(spec.train.seed)
    model = build_lucidrains(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=spec.train.weight_decay)
    batch_size = batches.batch_size
    state: dict[str, Any] = {}

    def labels_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["labels"]

    def step() -> float:
        batch = batches.next()
        if not state:
            outputs, latents = model.get_initial()
            tokens = config["num_register_tokens"] + shape.seq_len
            state["outputs"] = outputs.expand(batch_size, tokens, -1).contiguous()
            state["latents"] = latents.expand(batch_size, tokens, -1).contiguous()
        loss, _, state["outputs"], state["latents"], _, _ = model(
            batch["inputs"], state["outputs"], state["latents"], labels=labels_of(batch)
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return float(loss.detach())

    # its FLOPs per sample, counted on one eager step of two rows (forward + backward)
    probe = {k: v[:2] for k, v in batches.first().items()}
    outputs, latents = model.get_initial()
    tokens = config["num_register_tokens"] + shape.seq_len
    with FlopCounterMode(display=False) as counter:
        loss, *_ = model(
            probe["inputs"],
            outputs.expand(2, tokens, -1),
            latents.expand(2, tokens, -1),
            labels=probe["labels"],
        )
        loss.backward()
    model.zero_grad(set_to_none=True)
    return PeerStep(
        name="lucidrains",
        step=step,
        batch_size=batch_size,
        flops_per_sample=counter.get_total_flops() / 2,
        precision="fp32",
        compiled=False,
        notes=notes,
        model=model,
    )
