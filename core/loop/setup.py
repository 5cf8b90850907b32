"""Before the first step: open the data, build the model and its state, resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from attrs import frozen

from trm.data.mix_layout import MixLayout, read_layout
from trm.data.mix_sampler import MixSampler
from trm.data.puzzle_dataset import PuzzleSplit, open_split
from trm.data.reader import DataReader, MemoryReader, ReaderChoice
from trm.data.sampler import SplitIndex, TrainSampler
from trm.data.shape import DatasetShape
from trm.device.compile import compile_network
from trm.device.contract import HOST, DeviceBackend, Placement
from trm.errors import TrmError
from trm.evaluation.attempts import plan_attempts
from trm.evaluation.evaluate import TaskMetrics
from trm.evaluation.explore import eval_exploration
from trm.evaluation.per_task import TaskSplit, task_splits
from trm.evaluation.task_evaluation import TaskEvaluation, task_evaluation
from trm.loop.data_parallel import DataParallel
from trm.loop.device_failure import device_change_line, device_changed, recorded_device
from trm.model import EMA, DenseOptimizer, build_model, build_optimizers
from trm.model import candidates as latent_candidates
from trm.plan.dataset import find_data_source
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec
from trm.state import TrainState


@frozen
class RunData:
    """The train split's reader and sampler, and the evaluation split (None: none)."""

    reader: DataReader
    sampler: TrainSampler | MixSampler
    evaluation: SplitIndex | None
    shape: DatasetShape
    task_metrics: TaskMetrics | None = None
    task_evaluation: TaskEvaluation | None = None
    # a multi-task mix: its layout and each task's held-out split (None: one dataset)
    layout: MixLayout | None = None
    tasks: list[TaskSplit] | None = None


def open_reader(
    pm: TrmPluginManager,
    split: PuzzleSplit,
    choice: ReaderChoice,
    device: str,
    backend: DeviceBackend = HOST,
) -> DataReader:
    """The reader ``open_dataset`` gives for ``choice``; the core serves ``memory`` itself,
    reading ahead for a device with memory of its own and pinning where ``backend`` asks."""
    reader = pm.hook.open_dataset(
        split=split, choice=choice, device=device, pin_memory=backend.pins_host_batches
    )
    if reader is not None:
        return reader
    if choice.name == "memory":
        # On an accelerator the loop only queues work, so batches gathered (and pinned,
        # where the backend copies from pinned memory) ahead overlap with the device's; on
        # the CPU the loop's thread is the device, and a gather costs less than a thread's
        # wake-ups: read in the loop.
        ahead = choice.prefetch_steps if backend.uses_device_memory() else 0
        return MemoryReader(split, ahead, pin_memory=backend.pins_host_batches)
    raise TrmError(
        f"data.reader {choice.name!r}: no plugin serves it (is the streaming plugin switched "
        "off? trm plugins lists them); use data.reader = 'memory' or switch it on"
    )


def open_data(
    spec: RunSpec,
    data_dir: Path,
    pm: TrmPluginManager,
    choice: ReaderChoice,
    device: str,
    log: Callable[[str], None],
    backend: DeviceBackend = HOST,
) -> RunData:
    """Open the spec's splits in ``data_dir``: the train split through its reader, the
    evaluation split memory-mapped (it is read once per evaluation, in order)."""
    eval_path = data_dir / spec.data.eval_split
    evaluation = SplitIndex(open_split(eval_path)) if eval_path.exists() else None
    if evaluation is None:
        log(f"no {spec.data.eval_split!r} split in {data_dir}: training without evaluation")
    train_split = open_split(data_dir / spec.data.train_split)
    reader = open_reader(pm, train_split, choice, device, backend)
    log(f"data reader: {reader.name} ({choice.reason})")
    train = reader.index
    meta = train.split.metadata
    layout = read_layout(data_dir)
    if layout is not None:
        return _open_mix(spec, pm, layout, reader, evaluation)
    sampler = TrainSampler(train, spec.train.global_batch_size, spec.train.seed)
    shape = shape_of(meta, train.num_groups, sampler.epoch_rows)
    source = find_data_source(pm, spec.data.source)
    task_metrics = getattr(source, "task_metrics", None)
    attempts = plan_attempts(
        source, shape.seq_len, spec.train.eval_attempts, spec.train.seed, "train.eval_attempts"
    )
    scoring = task_evaluation(
        source, data_dir, spec.data.eval_split, spec.train.eval_pool, attempts
    )
    scoring.exploration = eval_exploration(pm, spec, source)
    return RunData(reader, sampler, evaluation, shape, task_metrics, scoring)


def shape_of(meta: Any, groups: int, epoch_rows: int) -> DatasetShape:
    """The dataset shape of a training split's metadata ``meta``, its ``groups`` and the
    sampler's ``epoch_rows``."""
    return DatasetShape(
        seq_len=int(meta.seq_len),
        vocab_size=int(meta.vocab_size),
        num_puzzle_identifiers=int(meta.num_puzzle_identifiers),
        total_puzzles=max(int(meta.total_puzzles), 0),
        total_groups=int(groups),
        epoch_rows=epoch_rows,
    )


def _open_mix(
    spec: RunSpec,
    pm: TrmPluginManager,
    layout: MixLayout,
    reader: DataReader,
    evaluation: SplitIndex | None,
) -> RunData:
    """:func:`open_data` for a multi-task mix: batches drawn by the tasks' weights (each row
    says its task), each task evaluated apart with its own source's metrics."""
    train = reader.index
    train.tasks = True  # each gathered row carries its task
    weights = np.array([entry.weight for entry in spec.data.mix] or [1.0] * len(layout.tasks))
    sampler = MixSampler(train, weights, spec.train.global_batch_size, spec.train.seed)
    meta = train.split.metadata
    shape = shape_of(meta, train.num_groups, sampler.epoch_rows)
    own = {
        t.name: getattr(find_data_source(pm, t.source), "task_metrics", None) for t in layout.tasks
    }
    tasks = task_splits(layout, evaluation, own) if evaluation is not None else None
    return RunData(reader, sampler, evaluation, shape, layout=layout, tasks=tasks)


def new_state(
    spec: RunSpec,
    runtime: RuntimeChoice,
    data: RunData,
    run_dir: Path,
    data_dir: Path,
    local_batch: int | None = None,
    optimizer: DenseOptimizer | None = None,
) -> TrainState:
    """A fresh state: the seeded model (in the layout the backend prefers for it, compiled
    when the runtime says so), optimizers, EMA.

    ``local_batch`` (data parallelism) is this rank's rows of the global batch: the
    micro-batch is at most that. Every rank seeds alike, so all start from the same weights.
    The backend seeds every generator the run draws from (the device's own included).
    ``optimizer`` is the dense optimizer's entry the run's plugins offer for
    ``train.optimizer`` (None: the built-in entry of that name).
    """
    runtime.backend.seed(spec.train.seed, torch.device(runtime.device))
    micro_batch_size = spec.runtime.micro_batch_size or spec.train.global_batch_size
    if local_batch is not None:
        micro_batch_size = min(micro_batch_size, local_batch)
    position_major = runtime.backend.position_major_mlp(runtime.compile)
    model = build_model(spec.arch, data.shape, position_major).to(torch.device(runtime.device))
    # "auto" starts off: the tier turned it "on" where that fits a faster micro-batch, and
    # memory-guard may switch it on after an out-of-memory error
    model.set_activation_checkpointing(spec.runtime.activation_checkpointing == "on")
    if runtime.compile:
        compile_network(model, runtime.backend, graphs=runtime.graphs)
    return TrainState(
        spec=spec,
        model=model,
        optimizers=build_optimizers(model, spec.train, optimizer),
        ema=EMA(model, spec.train.ema_rate) if spec.train.ema else None,
        carry=None,
        run_dir=run_dir,
        total_steps=spec.train.total_steps(data.sampler.epoch_rows),
        micro_batch_size=micro_batch_size,
        data_dir=str(data_dir),
        dataset_shape=data.shape,
        backend=runtime.backend,
        mix_layout=data.layout.to_dict() if data.layout is not None else None,
    )


def resume(
    state: TrainState,
    pm: TrmPluginManager,
    resume_from: str,
    log: Callable[[str], None],
    parallel: DataParallel | None = None,
) -> str:
    """Load the checkpoint ``resume_from`` names ("auto": the run's newest; "never": none;
    else a path) into ``state``. TrmError when it does not fit the run.

    Under data parallelism rank 0 chooses the checkpoint and every rank loads that file,
    then keeps its share (``DataParallel.adopt``). Returns a note when the checkpoint was
    written by another number of processes ("" otherwise)."""
    if resume_from == "never":
        return ""
    target = state.run_dir if resume_from == "auto" else Path(resume_from)
    payload = _load_agreed(pm, target, parallel)
    if payload is None:
        if resume_from != "auto":
            raise TrmError(f"--resume {resume_from}: no checkpoint found there")
        return ""
    where = f"checkpoint {payload.get('loaded_from', target)}"
    saved_device = recorded_device(payload)
    alone = parallel is None or not parallel.active  # under torchrun each rank has its GPU
    moved = saved_device is not None and device_changed(saved_device, state.device, alone)
    # when moved, the device-change line below says what became of the RNG states
    notes = state.load_state_dict(payload, where, rng_said=moved)
    for note in notes:
        log(f"warning: {note}")
    world_note = parallel.adopt(state, payload, log) if parallel is not None else ""
    if state.carry is not None:  # this process's rows only, straight to its device
        state.carry = state.carry.to(state.device)
    state.checkpoint_step = state.step
    log(f"resumed from step {state.step} ({state.samples} samples) of {where}")
    if moved:
        assert saved_device is not None
        rows = state.carry.batch_size if state.carry is not None else None
        log(device_change_line(saved_device, state.device, state.step, rows))
    return world_note


def _load_agreed(
    pm: TrmPluginManager, target: Path, parallel: DataParallel | None
) -> dict[str, Any] | None:
    """The checkpoint ``target`` names, the same file on every rank (rank 0 chooses it)."""
    if parallel is None or not parallel.active:
        return pm.hook.load_checkpoint(path=target, map_location="cpu")
    payload, error = None, None
    if parallel.world.is_first:
        try:
            payload = pm.hook.load_checkpoint(path=target, map_location="cpu")
        except TrmError as exc:
            error = str(exc)
    chosen = payload.get("loaded_from", str(target)) if payload is not None else None
    chosen, error = parallel.share_outcome((chosen, error))
    if error is not None:
        raise TrmError(error)
    if parallel.world.is_first or chosen is None:
        return payload
    return pm.hook.load_checkpoint(path=Path(chosen), map_location="cpu")


def first_carry(
    state: TrainState, data: RunData, placement: Placement, rows: slice = slice(None)
) -> None:
    """Give a fresh run its carry (every row halted: the first step resets each row);
    ``rows``: this rank's rows of the global batch under data parallelism. The carry holds
    ``train.latent_candidates`` reasoning states a row (a resumed one is fitted to it:
    :func:`trm.model.candidates.fit_carry`)."""
    k = state.spec.train.latent_candidates
    if state.carry is None:
        examples = data.sampler.examples_for_step(0)[rows]
        template = placement.to_device(data.reader.index.gather(examples))
        state.carry = latent_candidates.initial_carry(state.model, template, k)
    else:
        state.carry = latent_candidates.fit_carry(state.carry, k)
