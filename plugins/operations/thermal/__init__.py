"""thermal: watch temperatures, throttling and battery; cool down instead of cooking (opt-in).

``trm run SPEC --plugins thermal``. At the start it says which sensors it found (Linux
psutil sensors and CPU clock, macOS ``pmset -g therm``, NVIDIA NVML, battery) — or that there
are none, once, and then stays idle. Every ``TRM_THERMAL_POLL_S`` seconds (default 10) it
reads them after a step, classifies a level (normal, warm, hot, critical; see ``policy``) and,
when the level or the low-battery state changes, reports a ``ThermalEvent`` that the loop
passes to every plugin's ``on_thermal_event`` and records in metrics.jsonl.

Default responses:

- hot or critical: halve the micro-batch on entering (the global batch is kept, so
  learning is unchanged) and pause ``TRM_THERMAL_COOL_S`` seconds (default 60; three times
  that when critical) after each poll that is still hot; critical also asks for a checkpoint;
- back to normal: the micro-batch this plugin halved is restored;
- on battery below ``TRM_THERMAL_BATTERY_PERCENT`` (default 20): a checkpoint, then pauses of
  ``TRM_THERMAL_BATTERY_PAUSE_S`` (default 300) while it stays so.

``TRM_THERMAL_TRACE=FILE`` replays recorded readings instead of the hardware (JSON lines, as
``TRM_THERMAL_RECORD=FILE`` writes them); ``Thermal(sensor=...)`` does the same in process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trm import hookimpl
from trm.control import LEVELS, ThermalEvent, TrainControl, fit_micro_batch
from trm.plugins.operations.thermal.policy import ThermalSettings, battery_low, classify
from trm.plugins.operations.thermal.sensors import (
    Reading,
    Sensor,
    TraceSensor,
    describe,
    probe,
    reading_to_json,
)
from trm.state import TrainState

CRITICAL_PAUSE_FACTOR = 3.0


class Thermal:
    """thermal: watch temperatures, throttling and battery; cool down instead of cooking.

    One instance per run (the plugin manager makes it). ``sensor`` replaces the hardware
    (tests, replays); None probes the machine at the start of the run.
    """

    ACTIVATION = "opt-in"

    def __init__(self, sensor: Sensor | None = None) -> None:
        self.injected = sensor
        self.settings = ThermalSettings()
        self.sensor: Sensor | None = None
        self.last_poll_s = float("-inf")
        self.level = "normal"
        self.battery_low = False
        self.saved_micro_batch: int | None = None
        self.set_micro_batch: int | None = None

    def start(self, settings: ThermalSettings) -> list[str]:
        """Choose the sensor; returns the lines describing what was found."""
        self.settings = settings
        if self.injected is not None:
            self.sensor = self.injected
            return ["thermal: reading an injected sensor"]
        if settings.trace:
            self.sensor = TraceSensor.from_file(Path(settings.trace))
            return [f"thermal: replaying the trace {settings.trace}"]
        self.sensor, lines = probe()
        if self.sensor is None or self.sensor.names == ["battery"]:
            note = "thermal: sensors: none — no temperature or throttling sensor here"
            note += f" ({'; '.join(lines)})"
            note += (
                "; only the battery is watched" if self.sensor else "; thermal protection is off"
            )
            return [note]
        return [f"thermal: sensors: {'; '.join(lines)}"]

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        for line in self.start(ThermalSettings.from_env()):
            control.log(line)

    @hookimpl
    def on_step(self, state: TrainState, control: TrainControl) -> None:
        if self.sensor is None:
            return
        now = time.monotonic()
        if now - self.last_poll_s < self.settings.poll_s:
            return
        self.last_poll_s = now
        reading = self.sensor.read()
        if self.settings.record:
            with Path(self.settings.record).open("a", encoding="utf-8") as handle:
                handle.write(reading_to_json(reading) + "\n")
        level = classify(reading, self.settings, self.level)
        low = battery_low(reading, self.settings)
        if (level, low) != (self.level, self.battery_low):
            control.report_thermal_event(_event(reading, level, low))
            _respond_to_change(state, control, self, level, low)
            self.level, self.battery_low = level, low
        _respond_while(control, self, reading, level, low)


def _event(reading: Reading, level: str, low: bool) -> ThermalEvent:
    hottest = reading.hottest()
    return ThermalEvent(
        level=level,
        reading=describe(reading),
        temperature_c=None if hottest is None else hottest.celsius,
        on_battery=reading.on_battery,
        battery_percent=reading.battery_percent,
        throttled=_throttled(reading),
        battery_low=low,
        source=reading.source,
    )


def _throttled(reading: Reading) -> bool | None:
    signals: list[Any] = [reading.speed_limit_percent, reading.clock_fraction]
    if all(s is None for s in signals) and not reading.throttle_reasons:
        return None
    return bool(
        reading.throttle_reasons
        or (reading.speed_limit_percent is not None and reading.speed_limit_percent < 100)
        or (reading.clock_fraction is not None and reading.clock_fraction < 0.6)
    )


def _respond_to_change(
    state: TrainState, control: TrainControl, monitor: Thermal, level: str, low: bool
) -> None:
    hot = LEVELS.index(level) >= LEVELS.index("hot")
    was_hot = LEVELS.index(monitor.level) >= LEVELS.index("hot")
    if hot and not was_hot and state.micro_batch_size > 1:
        size = fit_micro_batch(state.micro_batch_size // 2, state.spec.train.global_batch_size)
        monitor.saved_micro_batch, monitor.set_micro_batch = state.micro_batch_size, size
        control.set_micro_batch(size, f"thermal: {level}; a smaller micro-batch runs cooler")
    if level == "critical" and monitor.level != "critical":
        control.request_checkpoint("thermal critical")
    if level == "normal" and monitor.saved_micro_batch is not None:
        if state.micro_batch_size == monitor.set_micro_batch:
            control.set_micro_batch(monitor.saved_micro_batch, "thermal: back to normal")
        else:
            control.log(
                f"thermal: back to normal; the micro-batch stays {state.micro_batch_size} "
                "(another plugin changed it meanwhile)"
            )
        monitor.saved_micro_batch = monitor.set_micro_batch = None
    if low and not monitor.battery_low:
        control.request_checkpoint("battery low")
    if monitor.battery_low and not low:
        control.log("thermal: battery no longer low; training continues")


def _respond_while(
    control: TrainControl, monitor: Thermal, reading: Reading, level: str, low: bool
) -> None:
    settings = monitor.settings
    if level == "critical":
        control.pause(
            settings.cool_s * CRITICAL_PAUSE_FACTOR, f"thermal critical: {describe(reading)}"
        )
    elif level == "hot":
        control.pause(settings.cool_s, f"cooling down: {describe(reading)}")
    if low:
        control.pause(
            settings.battery_pause_s,
            f"battery at {reading.battery_percent:.0f}% on battery; plug in to continue faster",
        )
