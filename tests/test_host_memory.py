"""Host memory reuse (trm.device.host_memory) and the CPU plugin's choice of it."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs
import pytest

from trm.device.host_memory import is_supported
from trm.hardware import HardwareProfile
from trm.plugins.backends import cpu
from trm.spec import RunSpec, RuntimeSpec

needs_glibc = pytest.mark.skipif(not is_supported(), reason="glibc on Linux only")

# A child process repeats a product with a 32 MiB output (the size of the MLP variant's
# position mixing at batch 32 in bf16; fp32 here, since bf16 is emulated and slow on CPUs
# without native bf16) and reports the page faults of rounds 13 to 20: glibc may take a few
# rounds to settle (seen: up to 9 with two threads), after which reuse finds the pages mapped.
_FAULTS_CHILD = """
import json, resource, sys
import torch
from trm.device.host_memory import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "reuse" else False
a = torch.ones(1024, 97)
b = torch.ones(97, 8192)
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    product = a @ b
    del product
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": sum(faults[12:])}))
"""

# A child process frees a 64 MiB block under reuse (so its pages stay resident), then
# releases idle memory, and reports its RSS after each stage.
_RELEASE_CHILD = """
import json
import psutil
import torch
from trm.device.host_memory import release_idle_memory, reuse_freed_memory
assert reuse_freed_memory()
rss = lambda: psutil.Process().memory_info().rss / 2**20
start = rss()
block = torch.ones(16 * 2**20)  # 64 MiB, every page written
survivor = torch.ones(1024)
del block
kept = rss() - start
release_idle_memory()
print(json.dumps({"kept_mib": kept, "after_release_mib": rss() - start}))
"""


def run_child(code: str, mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code, mode], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_glibc
def test_freed_large_blocks_are_reused_without_page_faults() -> None:
    default = run_child(_FAULTS_CHILD, "default")
    reused = run_child(_FAULTS_CHILD, "reuse")
    assert reused["applied"] is True
    # glibc's default maps each 32 MiB output afresh: at least one fault per 2 MiB huge
    # page, 8192 with 4 KiB pages; with reuse the later rounds find the pages mapped.
    assert default["faults"] >= 4 * 16
    assert reused["faults"] < default["faults"] / 5  # seen: 0 in the last eight rounds


@needs_glibc
def test_release_returns_kept_memory() -> None:
    result = run_child(_RELEASE_CHILD, "-")
    assert result["kept_mib"] >= 60  # freed, but kept for reuse
    assert result["after_release_mib"] <= result["kept_mib"] - 48


class FakeHeap:
    """Stands in for glibc: a scripted idle-heap size and a count of releases."""

    def __init__(self, idle_mib: list[int]) -> None:
        self.idle = [m * 2**20 for m in idle_mib]
        self.releases = 0

    def idle_heap_bytes(self) -> int:
        return self.idle.pop(0)

    def release_idle_memory(self) -> None:
        self.releases += 1


def test_valve_releases_when_idle_memory_grows_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import trm.device.host_memory as host_memory

    # learns 100 MiB over 2 steps (bound 2 x 100 + 50 = 250 MiB of growth), then the idle
    # heap grows by 64 MiB a step: a release at 292 MiB, the next once it is 250 MiB past that
    heap = FakeHeap([80, 100, 164, 228, 292, 356, 420, 484, 548, 612])
    monkeypatch.setattr(host_memory, "_applied", True)
    monkeypatch.setattr(host_memory, "idle_heap_bytes", heap.idle_heap_bytes)
    monkeypatch.setattr(host_memory, "release_idle_memory", heap.release_idle_memory)
    valve = host_memory.IdleMemoryValve(learn_steps=2, slack_bytes=50 * 2**20)
    released = [valve.after_step() for _ in range(10)]
    assert valve.limit_bytes == 250 * 2**20
    assert [r is not None for r in released] == [False] * 4 + [True] + [False] * 3 + [True, False]
    assert released[4] == 292 * 2**20 and released[8] == 548 * 2**20 and heap.releases == 2


def test_valve_is_inert_without_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    import trm.device.host_memory as host_memory

    monkeypatch.setattr(host_memory, "_applied", False)
    valve = host_memory.IdleMemoryValve(learn_steps=0, slack_bytes=0)
    assert valve.after_step() is None and valve.calls == 0


def test_cpu_plugin_asks_for_reuse_where_supported() -> None:
    choice = cpu.configure_cpu(spec=RunSpec(), hardware=HardwareProfile(physical_cores=2))
    assert choice is not None
    assert choice.reuse_host_memory is is_supported()


@pytest.mark.parametrize("setting", ["auto", "reuse", "system"])
def test_cpu_plugin_follows_runtime_host_memory(setting: str) -> None:
    spec = RunSpec(runtime=RuntimeSpec(host_memory=setting))
    choice = cpu.configure_cpu(spec=spec, hardware=HardwareProfile(physical_cores=2))
    assert choice.reuse_host_memory is (setting != "system" and is_supported())


def test_extreme_tier_runs_with_the_system_allocator_and_balanced_keeps_auto() -> None:
    from trm.memory import MemoryEstimate, MemoryItem
    from trm.plugins.planning import tiers

    estimate = MemoryEstimate(items=(MemoryItem("weights", 2**20),), host_budget_bytes=2**34)
    estimate = attrs.evolve(estimate, remake=lambda spec: estimate)
    hardware = HardwareProfile(physical_cores=2)
    extreme, changes = tiers.adapt(RunSpec(), hardware, estimate, "extreme")
    assert extreme.runtime.host_memory == "system"
    assert any(change.key == "runtime.host_memory" for change in changes)
    balanced, _ = tiers.adapt(RunSpec(), hardware, estimate, "balanced")
    assert balanced.runtime.host_memory == "auto"
