"""Before the first step: open the data, build the model and its state, resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from attrs import frozen

from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex, TrainSampler
from trm.data.shape import DatasetShape
from trm.device.compile import compile_for_runtime
from trm.device.transfer import to_device
from trm.errors import TrmError
from trm.model import EMA, build_model, build_optimizers
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState


@frozen
class RunData:
    """The train split, its sampler, and the evaluation split (None: none)."""

    train: SplitIndex
    sampler: TrainSampler
    evaluation: SplitIndex | None
    shape: DatasetShape


def open_data(spec: RunSpec, data_dir: Path, log: Callable[[str], None]) -> RunData:
    """Open the spec's splits in ``data_dir`` (arrays memory-mapped)."""
    train = SplitIndex(open_split(data_dir / spec.data.train_split))
    eval_path = data_dir / spec.data.eval_split
    evaluation = SplitIndex(open_split(eval_path)) if eval_path.exists() else None
    if evaluation is None:
        log(f"no {spec.data.eval_split!r} split in {data_dir}: training without evaluation")
    meta = train.split.metadata
    shape = DatasetShape(
        seq_len=int(meta.seq_len),
        vocab_size=int(meta.vocab_size),
        num_puzzle_identifiers=int(meta.num_puzzle_identifiers),
        total_puzzles=max(int(meta.total_puzzles), 0),
        total_groups=int(train.num_groups),
    )
    sampler = TrainSampler(train, spec.train.global_batch_size, spec.train.seed)
    return RunData(train, sampler, evaluation, shape)


def new_state(
    spec: RunSpec, runtime: RuntimeChoice, data: RunData, run_dir: Path, data_dir: Path
) -> TrainState:
    """A fresh state: the seeded model (compiled when the runtime says so), optimizers, EMA."""
    torch.manual_seed(spec.train.seed)
    model = build_model(spec.arch, data.shape).to(torch.device(runtime.device))
    compile_for_runtime(model, runtime)
    return TrainState(
        spec=spec,
        model=model,
        optimizers=build_optimizers(model, spec.train),
        ema=EMA(model, spec.train.ema_rate) if spec.train.ema else None,
        carry=None,
        run_dir=run_dir,
        total_steps=spec.train.total_steps(data.train.num_groups),
        micro_batch_size=spec.runtime.micro_batch_size or spec.train.global_batch_size,
        data_dir=str(data_dir),
        dataset_shape=data.shape,
    )


def resume(
    state: TrainState,
    pm: TrmPluginManager,
    resume_from: str,
    log: Callable[[str], None],
) -> None:
    """Load the checkpoint ``resume_from`` names ("auto": the run's newest; "never": none;
    else a path) into ``state``. TrmError when it does not fit the run."""
    if resume_from == "never":
        return
    target = state.run_dir if resume_from == "auto" else Path(resume_from)
    payload = pm.hook.load_checkpoint(path=target, map_location="cpu")
    if payload is None:
        if resume_from != "auto":
            raise TrmError(f"--resume {resume_from}: no checkpoint found there")
        return
    where = f"checkpoint {payload.get('loaded_from', target)}"
    for note in state.load_state_dict(payload, where):
        log(f"warning: {note}")
    state.checkpoint_step = state.step
    log(f"resumed from step {state.step} ({state.samples} samples) of {where}")


def first_carry(state: TrainState, data: RunData, device: torch.device) -> None:
    """Give a fresh run its carry (every row halted: the first step resets each row)."""
    if state.carry is None:
        template = to_device(data.train.gather(data.sampler.examples_for_step(0)), device)
        state.carry = state.model.initial_carry(template)
