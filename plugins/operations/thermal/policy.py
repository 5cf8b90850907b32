"""Thermal levels from readings, and the plugin's settings.

A temperature sets a level against three thresholds. By default they come from the sensor
itself where it reports them (``critical`` = 2 °C below its shutdown point, ``hot`` = its
own "high"/slowdown point, else 8 °C below critical; ``warm`` = 10 °C below hot), otherwise
80 / 90 / 98 °C; ``TRM_THERMAL_WARM_C`` / ``_HOT_C`` / ``_CRITICAL_C`` override them. Throttle
signals raise the level too: a macOS CPU speed limit below 100% (warm), 75% (hot), 50%
(critical); an NVIDIA thermal or power-brake slowdown (hot); a Linux CPU clock below 60% of
its maximum (warm, or hot when also warm by temperature). A level falls only when the
temperature is ``HYSTERESIS_C`` below the threshold that raised it, so it does not flap.
"""

from __future__ import annotations

import os
from pathlib import Path

from attrs import frozen

from trm.control import LEVELS
from trm.errors import TrmError
from trm.plugins.operations.thermal.sensors import Reading, TemperatureReading

DEFAULT_WARM_C, DEFAULT_HOT_C, DEFAULT_CRITICAL_C = 80.0, 90.0, 98.0
HYSTERESIS_C = 5.0
SLOW_CLOCK_FRACTION = 0.6
SPEED_LIMITS = ((50.0, "critical"), (75.0, "hot"), (99.999, "warm"))


@frozen
class ThermalSettings:
    """What the plugin does, from ``TRM_THERMAL_*`` environment variables (units in names)."""

    poll_s: float = 10.0
    cool_s: float = 60.0
    warm_c: float | None = None
    hot_c: float | None = None
    critical_c: float | None = None
    battery_low_percent: float = 20.0
    battery_pause_s: float = 300.0
    trace: str = ""
    record: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ThermalSettings:
        """Read ``TRM_THERMAL_POLL_S``, ``_COOL_S``, ``_WARM_C``, ``_HOT_C``, ``_CRITICAL_C``,
        ``_BATTERY_PERCENT``, ``_BATTERY_PAUSE_S``, ``_TRACE`` and ``_RECORD``."""
        env = os.environ if environ is None else environ
        names = {
            "poll_s": "TRM_THERMAL_POLL_S",
            "cool_s": "TRM_THERMAL_COOL_S",
            "warm_c": "TRM_THERMAL_WARM_C",
            "hot_c": "TRM_THERMAL_HOT_C",
            "critical_c": "TRM_THERMAL_CRITICAL_C",
            "battery_low_percent": "TRM_THERMAL_BATTERY_PERCENT",
            "battery_pause_s": "TRM_THERMAL_BATTERY_PAUSE_S",
        }
        values: dict[str, object] = {}
        for field_name, var in names.items():
            text = env.get(var, "").strip()
            if not text:
                continue
            try:
                number = float(text)
            except ValueError:
                number = -1.0
            if number < 0:
                raise TrmError(f"{var}={text!r}: expected a number of 0 or more")
            values[field_name] = number
        values["trace"] = env.get("TRM_THERMAL_TRACE", "")
        values["record"] = env.get("TRM_THERMAL_RECORD", "")
        if values["trace"] and not Path(str(values["trace"])).is_file():
            raise TrmError(f"TRM_THERMAL_TRACE={values['trace']}: no such file")
        return cls(**values)  # type: ignore[arg-type]

    def thresholds(self, sensor: TemperatureReading) -> tuple[float, float, float]:
        """(warm, hot, critical) °C for this sensor."""
        if self.critical_c is not None:
            critical = self.critical_c
        elif sensor.critical_c:
            critical = sensor.critical_c - 2.0
        else:
            critical = DEFAULT_CRITICAL_C
        if self.hot_c is not None:
            hot = self.hot_c
        elif sensor.high_c and sensor.high_c < critical:
            hot = sensor.high_c
        elif sensor.critical_c:
            hot = critical - 8.0
        else:
            hot = DEFAULT_HOT_C
        if self.warm_c is not None:
            warm = self.warm_c
        elif sensor.high_c or sensor.critical_c or self.hot_c is not None:
            warm = hot - 10.0
        else:
            warm = DEFAULT_WARM_C
        return warm, hot, critical


def _temperature_level(celsius: float, thresholds: tuple[float, float, float]) -> int:
    return sum(celsius >= limit for limit in thresholds)


def classify(reading: Reading, settings: ThermalSettings, current: str = "normal") -> str:
    """The level for ``reading``, given the ``current`` level (for hysteresis)."""
    now = LEVELS.index(current)
    level = 0
    for sensor in reading.temperatures:
        limits = settings.thresholds(sensor)
        raw = _temperature_level(sensor.celsius, limits)
        sticky = min(now, _temperature_level(sensor.celsius + HYSTERESIS_C, limits))
        level = max(level, raw, sticky)
    warm_by_heat = level >= 1
    if reading.speed_limit_percent is not None:
        for limit, name in SPEED_LIMITS:
            if reading.speed_limit_percent <= limit:
                level = max(level, LEVELS.index(name))
                break
    if reading.throttle_reasons:
        level = max(level, LEVELS.index("hot"))
    if reading.clock_fraction is not None and reading.clock_fraction < SLOW_CLOCK_FRACTION:
        level = max(level, LEVELS.index("hot" if warm_by_heat else "warm"))
    return LEVELS[level]


def battery_low(reading: Reading, settings: ThermalSettings) -> bool:
    """On battery and below the threshold."""
    return bool(
        reading.on_battery
        and reading.battery_percent is not None
        and reading.battery_percent < settings.battery_low_percent
    )
