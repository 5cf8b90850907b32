"""The thermal plugin: levels from readings, a replayed trace's events and responses."""

from __future__ import annotations

import types
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trm.api.training as run_cmd  # where `trm run` loads its plugins
from tests.tiny_run import (
    GLOBAL_BATCH,
    TOTAL_STEPS,
    build_tiny_data,
    checkpoint_steps,
    events,
    summary,
    write_spec,
)
from trm import hookimpl
from trm.plugins.operations import thermal
from trm.plugins.operations.thermal.policy import ThermalSettings, battery_low, classify
from trm.plugins.operations.thermal.sensors import (
    NvmlSensor,
    Reading,
    TemperatureReading,
    TraceSensor,
    parse_pmset,
    reading_from_json,
    reading_to_json,
)

DEFAULTS = ThermalSettings()


def _cpu(celsius: float, high: float | None = None, critical: float | None = None) -> Reading:
    return Reading("test", temperatures=(TemperatureReading("cpu", celsius, high, critical),))


def test_levels_follow_the_default_thresholds_without_sensor_limits():
    levels = [classify(_cpu(c), DEFAULTS) for c in (40, 79.9, 80, 89.9, 90, 97.9, 98)]
    assert levels == ["normal", "normal", "warm", "warm", "hot", "hot", "critical"]


def test_levels_use_the_sensors_own_limits_and_overrides():
    # coretemp-like: high 90, critical 100 -> warm 80, hot 90, critical 98
    assert classify(_cpu(85, 90, 100), DEFAULTS) == "warm"
    assert classify(_cpu(91, 90, 100), DEFAULTS) == "hot"
    # a GPU whose slowdown point is 87 and shutdown 95 -> critical at 93
    assert classify(_cpu(88, 87, 95), DEFAULTS) == "hot"
    assert classify(_cpu(93, 87, 95), DEFAULTS) == "critical"
    overridden = ThermalSettings(hot_c=70.0)
    assert classify(_cpu(61), overridden) == "warm"
    assert classify(_cpu(71), overridden) == "hot"


def test_a_level_falls_only_below_its_threshold_minus_the_hysteresis():
    assert classify(_cpu(88), DEFAULTS, current="hot") == "hot"
    assert classify(_cpu(84), DEFAULTS, current="hot") == "warm"
    assert classify(_cpu(88), DEFAULTS, current="normal") == "warm"
    assert classify(_cpu(60), DEFAULTS, current="critical") == "normal"


def test_throttling_raises_the_level():
    assert classify(Reading("macos", speed_limit_percent=100.0), DEFAULTS) == "normal"
    assert classify(Reading("macos", speed_limit_percent=90.0), DEFAULTS) == "warm"
    assert classify(Reading("macos", speed_limit_percent=70.0), DEFAULTS) == "hot"
    assert classify(Reading("macos", speed_limit_percent=40.0), DEFAULTS) == "critical"
    nvidia = Reading("nvml", throttle_reasons=("gpu0 hw_thermal_slowdown",))
    assert classify(nvidia, DEFAULTS) == "hot"
    slow = Reading("linux", clock_fraction=0.5)
    assert classify(slow, DEFAULTS) == "warm"
    slow_and_warm = Reading("linux", (TemperatureReading("cpu", 85.0),), clock_fraction=0.5)
    assert classify(slow_and_warm, DEFAULTS) == "hot"


def test_battery_is_low_only_on_battery_below_the_threshold():
    assert battery_low(Reading("b", on_battery=True, battery_percent=15.0), DEFAULTS)
    assert not battery_low(Reading("b", on_battery=False, battery_percent=5.0), DEFAULTS)
    assert not battery_low(Reading("b", on_battery=True, battery_percent=25.0), DEFAULTS)
    assert not battery_low(Reading("b"), DEFAULTS)


def test_pmset_output_is_parsed():
    limited = (
        "2024-05-01 CPU Power notify\n\tCPU_Scheduler_Limit \t= 100\n\tCPU_Speed_Limit \t= 63\n"
    )
    assert parse_pmset(limited).speed_limit_percent == 63.0
    calm = "Note: No thermal warning level has been recorded\n"
    assert parse_pmset(calm).speed_limit_percent == 100.0
    assert parse_pmset("something else") is None


def test_nvml_readings_decode_temperature_limits_and_throttle_reasons():
    fake = SimpleNamespace(
        nvmlDeviceGetTemperature=lambda handle, sensor: 84,
        nvmlDeviceGetTemperatureThreshold=lambda handle, kind: {0: 95, 1: 87}[kind],
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: 0x40 | 0x1,  # thermal + idle
    )
    reading = NvmlSensor(fake, ["handle0"]).read()
    assert reading.temperatures == (TemperatureReading("gpu0", 84.0, 87.0, 95.0),)
    assert reading.throttle_reasons == ("gpu0 hw_thermal_slowdown",)
    assert classify(reading, DEFAULTS) == "hot"


temperatures = st.builds(
    TemperatureReading,
    st.text(min_size=1, max_size=8),
    st.floats(0, 130),
    st.none() | st.floats(50, 110),
    st.none() | st.floats(60, 120),
)


@settings(max_examples=40)
@given(
    st.builds(
        Reading,
        st.sampled_from(["linux", "macos", "nvml", "trace"]),
        st.tuples(temperatures) | st.just(()),
        st.none() | st.floats(0, 1),
        st.none() | st.floats(0, 100),
        st.just(()) | st.just(("gpu0 hw_slowdown",)),
        st.none() | st.booleans(),
        st.none() | st.floats(0, 100),
    )
)
def test_readings_round_trip_through_a_recorded_trace(reading):
    assert reading_from_json(reading_to_json(reading)) == reading


TRACE = [
    _cpu(50),  # 1 normal
    _cpu(85),  # 2 warm
    _cpu(93),  # 3 hot: halve the micro-batch, cool down
    _cpu(92),  # 4 still hot: cool down again
    _cpu(99),  # 5 critical: checkpoint, longer pause
    _cpu(60),  # 6 normal: micro-batch restored
    Reading("test", (TemperatureReading("cpu", 60.0),), on_battery=True, battery_percent=15.0),
    Reading("test", (TemperatureReading("cpu", 60.0),), on_battery=True, battery_percent=14.0),
    Reading("test", (TemperatureReading("cpu", 60.0),), on_battery=False, battery_percent=16.0),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("thermal")
    data = build_tiny_data(base / "data")
    spec = write_spec(
        base,
        data,
        micro=GLOBAL_BATCH,
        checkpoint_interval_steps=0,
        checkpoint_keep=20,
        eval_interval=0,
    )
    trace = base / "trace.jsonl"
    trace.write_text("".join(reading_to_json(r) + "\n" for r in TRACE))
    return SimpleNamespace(base=base, spec=spec, trace=trace)


@pytest.fixture
def fast_thermal(monkeypatch, tiny):
    monkeypatch.setenv("TRM_THERMAL_TRACE", str(tiny.trace))
    monkeypatch.setenv("TRM_THERMAL_POLL_S", "0")
    monkeypatch.setenv("TRM_THERMAL_COOL_S", "0.01")
    monkeypatch.setenv("TRM_THERMAL_BATTERY_PAUSE_S", "0.02")


def test_replayed_trace_produces_the_expected_events_and_responses(
    tiny, tmp_path, cli, fast_thermal
):
    run_dir = tmp_path / "run"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "thermal")
    assert result.code == 0, result.err
    assert f"thermal: replaying the trace {tiny.trace}" in result.err

    thermal_events = [(e["step"], e["level"], e["battery_low"]) for e in events(run_dir, "thermal")]
    assert thermal_events == [
        (2, "warm", False),
        (3, "hot", False),
        (5, "critical", False),
        (6, "normal", False),
        (7, "normal", True),
        (9, "normal", False),
    ]
    hot = events(run_dir, "thermal")[1]
    assert hot["temperature_c"] == 93.0 and "cpu 93 °C" in hot["reading"]

    changes = [(e["step"], e["old"], e["new"]) for e in events(run_dir, "micro_batch")]
    assert changes == [(3, 8, 4), (6, 4, 8)]
    pauses = [(e["step"], e["seconds"]) for e in events(run_dir, "pause")]
    assert pauses == [(3, 0.01), (4, 0.01), (5, 0.03), (7, 0.02), (8, 0.02)]
    assert "battery no longer low" in result.err

    reasons = {
        step: torch.load(run_dir / "checkpoints" / f"step-{step:08d}.pt", weights_only=True)[
            "reason"
        ]
        for step in checkpoint_steps(run_dir)
    }
    assert reasons == {5: "thermal critical", 7: "battery low", TOTAL_STEPS: "end"}
    assert summary(run_dir)["samples"] == TOTAL_STEPS * GLOBAL_BATCH


def test_other_plugins_receive_the_events_and_act_through_control(
    tiny, tmp_path, cli, fast_thermal, monkeypatch
):
    received = []
    recorder = types.ModuleType("recorder")

    @hookimpl
    def on_thermal_event(event, control):
        received.append(event)
        if event.level == "critical":
            control.stop("too hot for this test")

    recorder.on_thermal_event = on_thermal_event
    real = run_cmd.load_plugins
    monkeypatch.setattr(
        run_cmd,
        "load_plugins",
        lambda names, extra_modules=(), **kw: real(
            names, extra_modules=[*extra_modules, ("recorder", recorder)], **kw
        ),
    )
    run_dir = tmp_path / "run"
    result = cli("run", tiny.spec, "--out", run_dir, "--plugins", "thermal")
    assert result.code == 0, result.err
    assert [e.level for e in received] == ["warm", "hot", "critical"]
    assert received[-1].temperature_c == 99.0 and received[-1].source == "test"
    assert summary(run_dir)["stopped"] == "too hot for this test"
    assert checkpoint_steps(run_dir)[-1] == 5


def test_an_injected_sensor_replaces_the_hardware(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_THERMAL_POLL_S", "0")
    monkeypatch.setenv("TRM_THERMAL_COOL_S", "0")
    injected = thermal.Thermal(sensor=TraceSensor([_cpu(50), _cpu(95)]))
    real = run_cmd.load_plugins
    monkeypatch.setattr(
        run_cmd,
        "load_plugins",
        lambda names, extra_modules=(), **kw: real(
            names, extra_modules=[*extra_modules, ("thermal", injected)], **kw
        ),
    )
    result = cli("run", tiny.spec, "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert [e["level"] for e in events(tmp_path / "run", "thermal")] == ["hot"]


def test_a_run_with_the_thermal_plugin_reports_what_this_machine_has(tiny, tmp_path, cli):
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "thermal")
    assert result.code == 0, result.err
    lines = [ln for ln in result.err.splitlines() if ln.startswith("trm: thermal: sensors: ")]
    assert len(lines) == 1, result.err
    found = lines[0].removeprefix("trm: thermal: sensors: ")
    assert found.startswith("none — no temperature or throttling sensor here") or any(
        name in found for name in ("linux:", "macos:", "NVML:")
    )
    print(lines[0])  # what this machine has, for the record (pytest -s)


def test_bad_thermal_settings_are_one_line_errors(tiny, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("TRM_THERMAL_COOL_S", "lots")
    result = cli("run", tiny.spec, "--out", tmp_path / "run", "--plugins", "thermal")
    assert result.code == 2
    assert "TRM_THERMAL_COOL_S='lots': expected a number" in result.err
