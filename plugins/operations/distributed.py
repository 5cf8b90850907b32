"""Data parallel under torchrun: each rank plans for its share of the node.

On (``ACTIVATION = "auto"``) when torchrun's environment is present (RANK, WORLD_SIZE,
LOCAL_RANK). The core does the data-parallel training itself (trm.device.distributed,
trm.loop.data_parallel: the process group, the slices of the global batch, the all-reduce,
rank-0 writes); this plugin makes the *plan* per rank, since the ranks of one node share it:

- cores: each rank plans with ``OMP_NUM_THREADS`` cores when that is set (torchrun sets 1
  when it starts several processes and the variable is unset), else with its share of the
  node's cores (cores / local ranks);
- host memory: each rank's budget is the node's budget divided by the local ranks, so the
  memory estimate, the tiers and the data reader's choice fit all ranks together;
- GPUs: the cuda backend already takes the GPU of ``LOCAL_RANK``, and the device budget is
  that GPU's memory; the estimate counts this rank's rows of the global batch.

The hardware profile a rank plans with (and rank 0 records in hardware.json) holds these
shares: ``physical_cores``/``logical_cores`` and ``memory_budget_bytes`` are this rank's.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import attrs

from trm import hookimpl
from trm.device.distributed import World, env_world, launched_by_torchrun
from trm.hardware import HardwareProfile, merge_profiles
from trm.runtime import RuntimeChoice
from trm.spec import RunSpec

ACTIVATION = "auto"
UNAVAILABLE_REASON = "not started by torchrun (RANK, WORLD_SIZE and LOCAL_RANK are not set)"
THREADS_ENV = "OMP_NUM_THREADS"


def is_available() -> bool:
    """On under torchrun."""
    return launched_by_torchrun()


def rank_cores(node_cores: int, world: World) -> tuple[int, str]:
    """The cores one rank plans with, and why: ``OMP_NUM_THREADS`` when set to a whole
    number, else ``node_cores`` divided among the node's ranks (at least 1)."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text), f"{THREADS_ENV}={text}"
    share = max(1, node_cores // max(1, world.local_size))
    return share, f"{node_cores} cores / {world.local_size} ranks on this node"


def rank_share(profile: HardwareProfile, world: World) -> HardwareProfile:
    """The part of the profile that differs per rank: cores and the host memory budget."""
    cores = profile.physical_cores or profile.logical_cores
    threads = rank_cores(cores, world)[0] if cores else None
    budget = profile.memory_budget_bytes
    return HardwareProfile(
        physical_cores=threads,
        logical_cores=threads,
        memory_budget_bytes=budget // max(1, world.local_size) if budget is not None else None,
    )


@hookimpl(wrapper=True)
def detect_hardware() -> Generator[None, list[HardwareProfile | None], list]:
    """Put this rank's share of cores and host memory first (it wins the merge)."""
    parts = yield
    world = env_world()
    if not world.distributed:
        return parts
    return [rank_share(merge_profiles(parts), world), *parts]


@hookimpl(wrapper=True)
def configure_runtime(
    spec: RunSpec, hardware: HardwareProfile
) -> Generator[None, RuntimeChoice | None, RuntimeChoice | None]:
    """Say which rank this is and what it plans with (the backend chose the device and the
    threads from the shared profile)."""
    choice = yield
    world = env_world()
    if choice is None or not world.distributed:
        return choice
    notes = [
        f"rank {world.rank} of {world.size} (local rank {world.local_rank} of "
        f"{world.local_size}): {choice.device}, {choice.threads} threads, host memory budget "
        "shared by the node's ranks"
    ]
    text = os.environ.get(THREADS_ENV, "").strip()
    cores = hardware.physical_cores or 0
    if text == "1" and spec.runtime.threads == 0 and world.local_size > 1:
        notes.append(
            f"{THREADS_ENV}=1 (torchrun's default when it starts several processes): export "
            f"{THREADS_ENV}=N before torchrun, or set runtime.threads, to give each rank N "
            "threads"
        )
    elif cores and choice.threads > cores:
        notes.append(f"{choice.threads} threads exceed this rank's share of {cores} cores")
    return attrs.evolve(choice, notes=(*notes, *choice.notes))
