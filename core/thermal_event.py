"""A change of thermal or power level, sent through ``on_thermal_event``."""

from __future__ import annotations

from attrs import frozen

LEVELS = ("normal", "warm", "hot", "critical")


@frozen
class ThermalEvent:
    """``level`` is one of LEVELS; ``reading`` says what was measured, e.g. "cpu 92 °C"."""

    level: str
    reading: str
    temperature_c: float | None = None
    on_battery: bool | None = None
    battery_percent: float | None = None
