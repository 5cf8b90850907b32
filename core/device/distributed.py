"""The process group under torchrun: who this process is, and the few collectives trm uses.

torchrun (``python -m torch.distributed.run``) starts one process per device and tells each
who it is through the environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``. :func:`start` joins the process group they describe (gloo for CPU
tensors, NCCL for CUDA tensors, both in one group), with :func:`collective_timeout_s` on
every collective, so a rank that hangs or dies makes the others fail instead of waiting for
ever. Without torchrun's environment (or with one process) nothing is started and every
function here is the one-process identity: ``gather_objects(x) == [x]``, ``shard(n)`` is
``range(n)``, reductions return their input.

Everything that crosses processes goes through torch.distributed; trm has no launcher and no
transport of its own. The seconds spent inside these collectives are counted
(:func:`collective_seconds`) so the loop can report them per step.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from attrs import frozen

from trm.device.contract import DeviceBackend
from trm.device.oom import is_out_of_memory
from trm.errors import TrainingFailed, TrmError

TIMEOUT_ENV = "TRM_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 600.0
SETUP_TIMEOUT_ENV = "TRM_SETUP_TIMEOUT_S"
DEFAULT_SETUP_TIMEOUT_S = 3 * 3600.0
# The variables torchrun sets in every worker; all three mean "launched by torchrun".
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"


@frozen
class World:
    """This process's place among the processes of one run.

    ``rank`` in [0, ``size``); ``local_rank`` in [0, ``local_size``) counts the processes
    on this machine (node). One process alone is ``World(0, 1, 0, 1)``.
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_first(self) -> bool:
        """Rank 0: the process that writes the run's files."""
        return self.rank == 0

    def rows(self, global_batch: int) -> slice:
        """This rank's contiguous rows of a global batch; TrmError unless they divide evenly.

        Rank r reads rows ``[r * B / W, (r + 1) * B / W)``, so the ranks' rows, in rank order,
        are the global batch in its order."""
        if global_batch % self.size:
            raise TrmError(
                f"train.global_batch_size = {global_batch} does not divide among "
                f"{self.size} processes; use a multiple of {self.size} (the global batch is "
                "what one process would train on, split evenly between the ranks)"
            )
        share = global_batch // self.size
        return slice(self.rank * share, (self.rank + 1) * share)

    def shard(self, total: int) -> range:
        """This rank's contiguous share of ``total`` items (the first ranks take one more
        when ``total`` does not divide evenly); the shares cover ``range(total)`` once."""
        base, extra = divmod(total, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (1 if self.rank < extra else 0))


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if not text.strip():
        return default
    try:
        return int(text)
    except ValueError:
        raise TrmError(f"environment variable {name}={text!r} is not a whole number") from None


def launched_by_torchrun() -> bool:
    """Whether torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) is present."""
    return all(name in os.environ for name in TORCHRUN_ENV)


def env_world() -> World:
    """The world torchrun's environment describes (one process without it)."""
    if not launched_by_torchrun():
        return World()
    size = _env_int("WORLD_SIZE", 1)
    local_size = _env_int("LOCAL_WORLD_SIZE", size)
    return World(_env_int("RANK", 0), size, _env_int("LOCAL_RANK", 0), local_size)


def restart_count() -> int:
    """How many times torchrun has restarted this job's workers (0: the first attempt)."""
    return _env_int(RESTART_ENV, 0) if launched_by_torchrun() else 0


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    if not text.strip():
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        raise TrmError(f"{name}={text!r}: give a positive number of seconds")
    return seconds


def collective_timeout_s() -> float:
    """Seconds a collective of the training loop may wait for the other ranks before it
    fails: ``TRM_COLLECTIVE_TIMEOUT_S``, default 600."""
    return _env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def setup_timeout_s() -> float:
    """Seconds the other ranks wait for rank 0 to prepare the run (build its data):
    ``TRM_SETUP_TIMEOUT_S``, default 3 hours."""
    return _env_seconds(SETUP_TIMEOUT_ENV, DEFAULT_SETUP_TIMEOUT_S)


def process_group_backend(backends: Sequence[DeviceBackend] = ()) -> str:
    """The torch.distributed backend string for a job whose devices ``backends`` know:
    gloo for CPU tensors, plus each available backend's ``process_group_backends()``
    (``"cpu:gloo,cuda:nccl"``)."""
    pairs = {"cpu": "gloo"}
    for device_backend in backends:
        if device_backend.unavailable_reason() is None:
            pairs.update(device_backend.process_group_backends())
    if len(pairs) == 1:
        return "gloo"
    return ",".join(f"{kind}:{name}" for kind, name in pairs.items())


def start(backends: Sequence[DeviceBackend] = ()) -> World:
    """Join the process group torchrun's environment describes; returns this process's World.

    ``backends``: the loaded device backends; their ``process_group_backends()`` join gloo
    (:func:`process_group_backend`) and each prepares its collective library first
    (``prepare_process_group``: NCCL's error handling, say).

    With one process (no torchrun, or ``WORLD_SIZE=1``) nothing is started. Called once per
    process before planning (``trm run``); a second call returns the running world.
    Besides the group, a gloo group with :func:`setup_timeout_s` carries the waits for rank
    0's preparations (``broadcast_from_first(..., patient=True)``).
    """
    world = env_world()
    if not world.distributed:
        return World()
    if not dist.is_available():
        raise TrmError("this PyTorch build has no torch.distributed; run one process")
    if dist.is_initialized():
        return current()
    timeout = timedelta(seconds=collective_timeout_s())
    for device_backend in backends:
        if device_backend.unavailable_reason() is None:
            device_backend.prepare_process_group()
    store = _attempt_store(world, timeout)
    if store is None:
        dist.init_process_group(backend=process_group_backend(backends), timeout=timeout)
    else:
        dist.init_process_group(
            backend=process_group_backend(backends),
            store=store,
            rank=world.rank,
            world_size=world.size,
            timeout=timeout,
        )
    _patient[0] = dist.new_group(backend="gloo", timeout=timedelta(seconds=setup_timeout_s()))
    return current()


def _attempt_store(world: World, timeout: timedelta) -> Any:
    """The rendezvous store of this attempt of the job, or None for torch's default.

    torchrun's workers share its agent's TCPStore (``TORCHELASTIC_USE_AGENT_STORE``), which
    outlives a restart: the keys of the failed attempt would make the new processes connect
    to the dead ones (pytorch/pytorch#135712). The keys of each attempt therefore go under
    ``trm/attempt-N`` (N = ``TORCHELASTIC_RESTART_COUNT``, the same on every worker of a node).
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    address, port = os.environ.get("MASTER_ADDR"), _env_int("MASTER_PORT", 0)
    if not address or not port:
        return None
    client = dist.TCPStore(address, port, world.size, is_master=False, timeout=timeout)
    return dist.PrefixStore(f"trm/attempt-{restart_count()}", client)


def finish() -> None:
    """Leave the process group (no-op when none was started)."""
    if dist.is_available() and dist.is_initialized():
        _patient[0] = None
        dist.destroy_process_group()


def current() -> World:
    """The running world: the process group's ranks, or one process when none was started."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    env = env_world()
    size = dist.get_world_size()
    local_size = env.local_size if env.size == size else 1
    return World(dist.get_rank(), size, env.local_rank, local_size)


def active() -> bool:
    """Whether a process group of more than one process is running."""
    return current().distributed


# -------------------------------------------------------------------------------------------
# Collectives (identity with one process); the time spent in them is counted
# -------------------------------------------------------------------------------------------

_spent_s = [0.0]
_patient: list[Any] = [None]  # the long-timeout gloo group of start()


def collective_seconds() -> float:
    """Seconds this process has spent in the collectives of this module so far."""
    return _spent_s[0]


@contextmanager
def _timed() -> Iterator[None]:
    """Count the seconds of a collective; a collective that fails (a rank died, or did not
    answer within the timeout) becomes TrainingFailed, one line for the user."""
    started = time.perf_counter()
    try:
        yield
    except RuntimeError as exc:  # DistBackendError, DistNetworkError, gloo's and NCCL's errors
        if is_out_of_memory(exc):
            raise
        text = str(exc).strip()
        detail = text.splitlines()[0][:200] if text else type(exc).__name__
        # Said at once: torchrun ends the surviving ranks soon after one dies, maybe before
        # this one has closed its run and printed its error line.
        print(
            f"trm: rank {current().rank}: a collective with the other ranks failed ({detail}); "
            "stopping",
            file=sys.stderr,
            flush=True,
        )
        raise TrainingFailed(
            f"rank {current().rank}: a collective with the other ranks failed ({detail}); "
            "another rank has died or stopped answering, so this one stops too — under "
            "torchrun --max-restarts the job resumes from its last checkpoint"
        ) from exc
    finally:
        _spent_s[0] += time.perf_counter() - started


def all_reduce_sum_(tensors: Sequence[torch.Tensor]) -> None:
    """Sum ``tensors`` over the ranks, in place, with one collective per (device, dtype).

    The tensors are flattened into one buffer, as DDP's buckets are, so a model's gradients
    cost one all-reduce rather than one per parameter."""
    if not active() or not tensors:
        return
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    for members in groups.values():
        # Flattening allocates a gradient-sized buffer: out of memory here is this rank's
        # own, raised as such (the step is undone and retried), not a failed collective.
        flat = torch.cat([t.reshape(-1) for t in members])
        with _timed():
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for t in members:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


def all_reduce_max(values: Sequence[float]) -> list[float]:
    """The element-wise maximum of ``values`` over the ranks (float64, CPU)."""
    if not active():
        return [float(v) for v in values]
    tensor = torch.tensor(list(values), dtype=torch.float64)
    with _timed():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def all_reduce_sums(values: Sequence[float]) -> list[float]:
    """The element-wise sum of ``values`` over the ranks (float64, CPU)."""
    if not active():
        return [float(v) for v in values]
    tensor = torch.tensor(list(values), dtype=torch.float64)
    with _timed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def all_gather_rows(tensor: torch.Tensor, rows_each: int | None = None) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along dim 0 in rank order; the other dims and the
    dtype must agree. ``rows_each``: every rank holds exactly that many rows (the caller
    knows it), so no counts are exchanged and nothing is read back to the host; None: the
    counts may differ and are gathered first (one host read)."""
    if not active():
        return tensor
    size = dist.get_world_size()
    with _timed():
        if rows_each is not None:
            if tensor.shape[0] != rows_each:
                raise ValueError(f"all_gather_rows: {tensor.shape[0]} rows, expected {rows_each}")
            parts = [torch.empty_like(tensor) for _ in range(size)]
            dist.all_gather(parts, tensor.contiguous())
            return torch.cat(parts)
        counts = torch.tensor([tensor.shape[0]], dtype=torch.int64, device=tensor.device)
        all_counts = [torch.zeros_like(counts) for _ in range(size)]
        dist.all_gather(all_counts, counts)
        rows = [int(c.item()) for c in all_counts]
        longest = max(rows)
        padded = tensor
        if tensor.shape[0] < longest:
            pad = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
            padded = torch.cat([tensor, pad])
        parts = [torch.empty_like(padded) for _ in range(size)]
        dist.all_gather(parts, padded.contiguous())
    return torch.cat([part[:n] for part, n in zip(parts, rows, strict=True)])


def gather_objects(obj: Any, patient: bool = False) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank; ``[obj]`` with one
    process. For small records — a task evaluator's predictions, a decision's reasons —
    not for tensors the size of a model (those go through the tensor collectives).
    ``patient``: wait up to :func:`setup_timeout_s`, as :func:`broadcast_from_first` does."""
    if not active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    with _timed():
        dist.all_gather_object(out, obj, group=_patient[0] if patient else None)
    return out


def gather_to_first(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` in rank order on rank 0 (None on the other ranks); ``[obj]`` with
    one process. Used for what only rank 0 writes (the checkpoint's per-rank parts)."""
    if not active():
        return [obj]
    world = current()
    out: list[Any] | None = [None] * world.size if world.is_first else None
    with _timed():
        dist.gather_object(obj, out, dst=0)
    return out


def broadcast_from_first(obj: Any, patient: bool = False) -> Any:
    """Rank 0's ``obj`` on every rank (``obj`` itself with one process). ``patient``: wait
    up to :func:`setup_timeout_s` for rank 0 (it may be building the data), not the
    collective timeout."""
    if not active():
        return obj
    box = [obj]
    with _timed():
        dist.broadcast_object_list(box, src=0, group=_patient[0] if patient else None)
    return box[0]


def barrier() -> None:
    """Wait until every rank gets here (no-op with one process)."""
    if active():
        with _timed():
            dist.barrier()
