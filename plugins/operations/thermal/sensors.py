"""Where temperatures, throttling and battery come from: one ``Reading`` per poll.

Sources (each is used where it works; ``probe`` says which):

- linux: ``psutil.sensors_temperatures()`` (CPU chips preferred: coretemp, k10temp, …),
  the CPU clock as a fraction of its maximum (``psutil.cpu_freq``), a throttling hint;
- macos: ``pmset -g therm`` — ``CPU_Speed_Limit`` below 100 means the OS is slowing the CPU;
- nvml: NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, import name ``pynvml``):
  temperature, its slowdown/shutdown thresholds, and the active thermal/power throttle reasons;
- battery: ``psutil.sensors_battery()`` on any OS.

A ``TraceSensor`` replays readings recorded as JSON lines (``TRM_THERMAL_RECORD`` writes
them), so tests and demonstrations need no hot hardware. Any object with ``read() ->
Reading`` can stand in as a sensor.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import cattrs
import psutil
from attrs import frozen

from trm.errors import TrmError

CPU_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "soc_thermal")
# NVML clock-event reason bits that mean heat or power is slowing the GPU (nvml.h).
NVML_SLOWDOWN_BITS = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
NVML_TEMPERATURE_GPU = 0
NVML_THRESHOLD_SHUTDOWN = 0
NVML_THRESHOLD_SLOWDOWN = 1
_SPEED_LIMIT = re.compile(r"CPU_Speed_Limit\s*=\s*(\d+)")


@frozen
class TemperatureReading:
    """One sensor: ``high_c`` where hardware starts slowing down, ``critical_c`` shutdown."""

    label: str
    celsius: float
    high_c: float | None = None
    critical_c: float | None = None


@frozen
class Reading:
    """Everything one poll found; a field is None (or empty) where nothing reports it."""

    source: str
    temperatures: tuple[TemperatureReading, ...] = ()
    clock_fraction: float | None = None
    speed_limit_percent: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    on_battery: bool | None = None
    battery_percent: float | None = None

    def hottest(self) -> TemperatureReading | None:
        return max(self.temperatures, key=lambda t: t.celsius, default=None)


class Sensor(Protocol):
    """Anything that can be polled for a Reading."""

    def read(self) -> Reading: ...


_CONVERTER = cattrs.Converter()


def reading_to_json(reading: Reading) -> str:
    return json.dumps(_CONVERTER.unstructure(reading))


def reading_from_json(line: str) -> Reading:
    return _CONVERTER.structure(json.loads(line), Reading)


# ---- the sources ----------------------------------------------------------------------


def read_linux() -> Reading | None:
    """CPU temperatures and clock fraction from psutil; None when neither is readable."""
    temps: list[TemperatureReading] = []
    read_temps = getattr(psutil, "sensors_temperatures", None)
    chips: dict[str, list[Any]] = {}
    if read_temps is not None:
        try:
            chips = read_temps() or {}
        except (OSError, RuntimeError):
            chips = {}
    preferred = {name: entries for name, entries in chips.items() if name in CPU_CHIPS}
    for name, entries in (preferred or chips).items():
        for entry in entries:
            if entry.current is None or entry.current <= 0:
                continue
            label = f"{name} {entry.label}".strip() if entry.label else name
            temps.append(
                TemperatureReading(
                    label, float(entry.current), entry.high or None, entry.critical or None
                )
            )
    fraction = None
    try:
        freq = psutil.cpu_freq()
    except (OSError, RuntimeError, NotImplementedError):
        freq = None
    if freq is not None and freq.max and freq.max > 0 and freq.current:
        fraction = min(1.0, float(freq.current) / float(freq.max))
    if not temps and fraction is None:
        return None
    return Reading(source="linux", temperatures=tuple(temps), clock_fraction=fraction)


def read_macos(run: Callable[..., Any] = subprocess.run) -> Reading | None:
    """``CPU_Speed_Limit`` from ``pmset -g therm``; None off macOS or when it says nothing."""
    if sys.platform != "darwin" or shutil.which("pmset") is None:
        return None
    try:
        result = run(["pmset", "-g", "therm"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_pmset(result.stdout)


def parse_pmset(text: str) -> Reading | None:
    """The speed limit in ``pmset -g therm`` output (100 when no limit is recorded)."""
    match = _SPEED_LIMIT.search(text)
    if match:
        return Reading(source="macos", speed_limit_percent=float(match.group(1)))
    if "No thermal warning level has been recorded" in text:
        return Reading(source="macos", speed_limit_percent=100.0)
    return None


class NvmlSensor:
    """NVIDIA GPUs through NVML; construct with :meth:`open` (None when unavailable)."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self.nvml = nvml
        self.handles = handles
        self.thresholds = [self._thresholds(h) for h in handles]

    @classmethod
    def open(cls) -> tuple[NvmlSensor | None, str]:
        try:
            import pynvml
        except ImportError:
            return None, "no NVML (pip install nvidia-ml-py to read NVIDIA GPUs)"
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:  # NVMLError when there is no driver or GPU
            return None, f"no NVIDIA GPU ({exc})"
        if count == 0:
            return None, "no NVIDIA GPU"
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        return cls(pynvml, handles), f"NVML: {count} NVIDIA GPU(s)"

    def _thresholds(self, handle: Any) -> tuple[float | None, float | None]:
        values = []
        for kind in (NVML_THRESHOLD_SLOWDOWN, NVML_THRESHOLD_SHUTDOWN):
            try:
                values.append(float(self.nvml.nvmlDeviceGetTemperatureThreshold(handle, kind)))
            except Exception:
                values.append(None)
        return values[0], values[1]

    def read(self) -> Reading:
        temps, reasons = [], []
        event_reasons = getattr(
            self.nvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            getattr(self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
        )
        for index, handle in enumerate(self.handles):
            high, critical = self.thresholds[index]
            try:
                celsius = self.nvml.nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)
                temps.append(TemperatureReading(f"gpu{index}", float(celsius), high, critical))
            except Exception:
                pass
            try:
                mask = int(event_reasons(handle)) if event_reasons else 0
            except Exception:
                mask = 0
            reasons += [
                f"gpu{index} {name}" for bit, name in NVML_SLOWDOWN_BITS.items() if mask & bit
            ]
        return Reading(source="nvml", temperatures=tuple(temps), throttle_reasons=tuple(reasons))


def read_battery() -> Reading | None:
    """Battery charge and whether the machine runs on it; None without a battery."""
    sensor = getattr(psutil, "sensors_battery", None)
    try:
        battery = sensor() if sensor else None
    except (OSError, RuntimeError):
        battery = None
    if battery is None:
        return None
    plugged = battery.power_plugged
    return Reading(
        source="battery",
        on_battery=None if plugged is None else not plugged,
        battery_percent=float(battery.percent),
    )


# ---- combining and replaying ----------------------------------------------------------


class SystemSensor:
    """The sources that answered at probe time, merged into one Reading per poll."""

    def __init__(self, readers: list[Callable[[], Reading | None]], names: list[str]) -> None:
        self.readers = readers
        self.names = names

    def read(self) -> Reading:
        parts = [r for r in (reader() for reader in self.readers) if r is not None]
        return merge_readings(parts, "+".join(self.names))


def merge_readings(parts: list[Reading], source: str) -> Reading:
    """One Reading from several sources' parts (first non-None value wins per field)."""

    def first(name: str) -> Any:
        return next((getattr(p, name) for p in parts if getattr(p, name) is not None), None)

    return Reading(
        source=source,
        temperatures=tuple(t for p in parts for t in p.temperatures),
        clock_fraction=first("clock_fraction"),
        speed_limit_percent=first("speed_limit_percent"),
        throttle_reasons=tuple(r for p in parts for r in p.throttle_reasons),
        on_battery=first("on_battery"),
        battery_percent=first("battery_percent"),
    )


class TraceSensor:
    """Replays readings in order; after the last one it keeps returning the last."""

    def __init__(self, readings: list[Reading]) -> None:
        if not readings:
            raise ValueError("a trace needs at least one reading")
        self.readings = list(readings)
        self.position = 0

    @classmethod
    def from_file(cls, path: Path) -> TraceSensor:
        """Read a JSON-lines trace; TrmError names the file and line that is malformed."""
        try:
            lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        except OSError as exc:
            raise TrmError(f"thermal trace {path} cannot be read: {exc.strerror}") from exc
        readings = []
        for number, line in enumerate(lines, 1):
            try:
                readings.append(reading_from_json(line))
            except (ValueError, cattrs.BaseValidationError) as exc:
                raise TrmError(
                    f"thermal trace {path}, line {number}: not a reading ({exc})"
                ) from exc
        if not readings:
            raise TrmError(f"thermal trace {path} holds no readings")
        return cls(readings)

    def read(self) -> Reading:
        reading = self.readings[min(self.position, len(self.readings) - 1)]
        self.position += 1
        return reading


def describe(reading: Reading) -> str:
    """A reading in words: temperatures, throttling, battery."""
    words = [f"{t.label} {t.celsius:.0f} °C" for t in reading.temperatures[:4]]
    if len(reading.temperatures) > 4:
        words.append(f"+{len(reading.temperatures) - 4} more sensors")
    if reading.clock_fraction is not None:
        words.append(f"CPU clock {reading.clock_fraction:.0%} of max")
    if reading.speed_limit_percent is not None:
        words.append(f"CPU speed limit {reading.speed_limit_percent:.0f}%")
    if reading.throttle_reasons:
        words.append("throttling: " + ", ".join(reading.throttle_reasons))
    if reading.battery_percent is not None:
        where = "on battery" if reading.on_battery else "on mains"
        words.append(f"{where}, battery {reading.battery_percent:.0f}%")
    return "; ".join(words) or "no values"


def probe() -> tuple[SystemSensor | None, list[str]]:
    """The sensor made of every source that answers here, and a line per source."""
    readers: list[Callable[[], Reading | None]] = []
    names: list[str] = []
    lines: list[str] = []
    for name, reader, missing in (
        ("linux", read_linux, "no CPU temperature sensor or clock limits via psutil"),
        ("macos", read_macos, "pmset: not macOS"),
    ):
        found = reader()
        if found is not None:
            readers.append(reader)
            names.append(name)
            lines.append(f"{name}: {describe(found)}")
        else:
            lines.append(missing)
    nvml, nvml_note = NvmlSensor.open()
    if nvml is not None:
        readers.append(nvml.read)
        names.append("nvml")
        lines.append(f"{nvml_note}: {describe(nvml.read())}")
    else:
        lines.append(nvml_note)
    battery = read_battery()
    if battery is not None:
        readers.append(read_battery)
        names.append("battery")
        lines.append(describe(battery))
    else:
        lines.append("no battery")
    if not readers:
        return None, lines
    return SystemSensor(readers, names), lines
