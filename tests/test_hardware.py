"""Hardware profile: merging, unknown stays None, the system plugin's detection and budget."""

from __future__ import annotations

import json

from trm.hardware import (
    AcceleratorInfo,
    DeviceSpeed,
    HardwareProfile,
    describe,
    merge_profiles,
)
from trm.measure.machine import load_cached_speeds, save_cached_speeds
from trm.plugins.planning import system


def test_merge_keeps_the_first_known_value_and_leaves_unknowns_none():
    cpu = HardwareProfile(cpu_model="A", physical_cores=4)
    gpu = HardwareProfile(cpu_model="B", accelerators=(AcceleratorInfo("gpu", 0, name="G"),))
    merged = merge_profiles([None, cpu, gpu])
    assert merged.cpu_model == "A" and merged.physical_cores == 4
    assert merged.accelerators[0].name == "G"
    assert merged.unified_memory is None and describe(merged.unified_memory) == "unknown"


def test_budget_keeps_an_os_reserve_and_never_exceeds_what_is_available():
    gib = 2**30
    reserve, budget = system.memory_budget(16 * gib, 15 * gib)
    assert reserve == int(1.6 * gib) and budget == 16 * gib - reserve
    assert system.memory_budget(16 * gib, 3 * gib)[1] == 3 * gib
    assert system.memory_budget(4 * gib, 4 * gib)[0] == gib  # at least 1 GiB reserved


def test_system_plugin_reports_this_linux_machine_without_guessing(tmp_path):
    profile = system.detect(tmp_path / "runs")
    assert profile.python and profile.torch_version
    assert profile.memory_total_bytes > profile.memory_reserve_bytes > 0
    assert 0 <= profile.memory_budget_bytes <= profile.memory_total_bytes
    assert profile.storage_free_bytes > 0 and profile.storage_path.endswith("runs")
    assert profile.onednn_available in (True, False)
    if profile.cpu_flags is not None:
        assert set(profile.cpu_features) <= set(profile.cpu_flags) | {"neon", "sse4_2"}
        assert profile.cpu_native_bf16 == any(
            f in profile.cpu_features for f in ("avx512_bf16", "amx_bf16", "bf16")
        )
    assert profile.accelerators is None  # the system plugin never fills accelerator facts


def test_vector_features_are_normalised_from_raw_flags():
    flags = ("fpu", "sse4_2", "avx2", "avx512f", "avx512_bf16", "amx_tile")
    assert system.cpu_features(flags, "x86_64") == (
        "sse4_2",
        "avx2",
        "avx512f",
        "avx512_bf16",
        "amx_tile",
    )
    assert system.cpu_features(("fp", "asimd"), "aarch64") == ("neon",)
    assert system.cpu_features(None, "x86_64") is None


def test_benchmark_cache_round_trips_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("TRM_CACHE_DIR", str(tmp_path))
    assert load_cached_speeds() == ((), None)
    speeds = (DeviceSpeed("cpu", 50.0, 170.0, 12.5),)
    path = save_cached_speeds(speeds, 800.0)
    assert json.loads(path.read_text())["devices"][0]["matmul_bf16_gflops"] == 170.0
    assert load_cached_speeds() == (speeds, 800.0)
    assert system.detect(tmp_path).device_speeds == speeds


def test_a_memory_cgroup_limit_is_found_in_v1_and_v2_and_the_tightest_wins(tmp_path):
    from trm.plugins.planning.system import cgroup_memory_limit

    root = tmp_path / "cgroup"
    v1 = root / "memory" / "jobs" / "trm"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2_500_000_000}\n")
    (v1 / "memory.usage_in_bytes").write_text("1000\n")
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc = tmp_path / "cgroup.txt"
    proc.write_text("4:memory:/jobs/trm\n1:cpu:/\n")
    assert cgroup_memory_limit(proc, root) == (2_500_000_000, 1000)
    v2 = root / "user.slice"
    v2.mkdir()
    (v2 / "memory.max").write_text("1073741824\n")
    (v2 / "memory.current").write_text("5\n")
    proc.write_text("4:memory:/jobs/trm\n0::/user.slice\n")
    assert cgroup_memory_limit(proc, root) == (1073741824, 5)
    (v2 / "memory.max").write_text("max\n")
    proc.write_text("0::/user.slice\n")
    assert cgroup_memory_limit(proc, root) is None
    assert cgroup_memory_limit(tmp_path / "absent", root) is None
