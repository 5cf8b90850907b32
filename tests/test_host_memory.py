"""Host memory reuse (trm.host_memory) and the CPU plugin's choice of it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trm.hardware import HardwareProfile
from trm.host_memory import is_supported
from trm.plugins import cpu
from trm.spec import RunSpec

needs_glibc = pytest.mark.skipif(not is_supported(), reason="glibc on Linux only")

# A child process repeats a bf16 product with a 32 MiB output (the shape of the MLP
# variant's position mixing at batch 32) and reports the page faults of rounds 3 to 12.
_FAULTS_CHILD = """
import json, resource, sys
import torch
from trm.host_memory import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "reuse" else False
a = torch.ones(1024, 97, dtype=torch.bfloat16)
b = torch.ones(97, 16384, dtype=torch.bfloat16)
faults = []
for _ in range(12):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    product = a @ b
    del product
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": sum(faults[2:])}))
"""

# A child process runs an allocation pattern that fragments a reusing heap: each round a
# 64 MiB block is freed with a small survivor allocated after it, and glibc cannot place the
# next (aligned) 64 MiB block in the hole. It reports how much its RSS grew.
_VALVE_CHILD = """
import json, sys
import psutil
import torch
from trm.host_memory import IdleMemoryValve, reuse_freed_memory
reuse_freed_memory()
valve = IdleMemoryValve(learn_steps=2, slack_bytes=64 * 2**20)
keep = []
releases = 0
start = psutil.Process().memory_info().rss
for _ in range(16):
    block = torch.ones(16 * 2**20)  # 64 MiB
    keep.append(torch.ones(1024))  # a small survivor allocated after it
    del block
    if sys.argv[1] == "valve":
        releases += valve.after_step() is not None
grown = psutil.Process().memory_info().rss - start
print(json.dumps({"grown_mib": grown / 2**20, "releases": releases}))
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
    assert reused["faults"] < default["faults"] / 5  # seen: 0 to one round of ten


@needs_glibc
def test_valve_bounds_the_idle_memory_of_a_fragmenting_pattern() -> None:
    unbounded = run_child(_VALVE_CHILD, "none")
    bounded = run_child(_VALVE_CHILD, "valve")
    assert unbounded["grown_mib"] >= 12 * 64  # a hole a round, none given back
    assert bounded["releases"] >= 1
    assert bounded["grown_mib"] <= 6 * 64


def test_valve_is_inert_without_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    import trm.host_memory as host_memory

    monkeypatch.setattr(host_memory, "_applied", False)
    valve = host_memory.IdleMemoryValve(learn_steps=0, slack_bytes=0)
    assert valve.after_step() is None and valve.calls == 0


def test_cpu_plugin_asks_for_reuse_where_supported() -> None:
    choice = cpu.configure_runtime(spec=RunSpec(), hardware=HardwareProfile(physical_cores=2))
    assert choice is not None
    assert choice.reuse_host_memory is is_supported()
