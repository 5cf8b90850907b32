"""A change of thermal or power level, sent through ``on_thermal_event``."""

from __future__ import annotations

from attrs import frozen

LEVELS = ("normal", "warm", "hot", "critical")


@frozen
class ThermalEvent:
    """One change of level, with the reading behind it.

    ``level`` is one of LEVELS; ``reading`` says what was measured in words, e.g.
    "cpu 92 °C (k10temp Tctl), clock 61% of max". ``temperature_c`` is the hottest sensor,
    ``throttled`` whether the hardware reports slowing down (None: cannot tell);
    ``on_battery``/``battery_percent`` describe power (None: no battery or unknown);
    ``battery_low`` is True when on battery below the plugin's threshold. ``source`` names
    the sensor source ("linux", "macos", "nvml", "trace").
    """

    level: str
    reading: str
    temperature_c: float | None = None
    on_battery: bool | None = None
    battery_percent: float | None = None
    throttled: bool | None = None
    battery_low: bool = False
    source: str = ""
