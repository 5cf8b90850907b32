"""What compiling the network cost and saved on this machine, shape by shape: the measurements
the small-network compile decision (:mod:`trm.device.compile_payoff`) reads.

The ledger is one JSON file in trm's cache directory (:func:`trm.paths.cache_dir`,
``TRM_CACHE_DIR`` overrides it; ``TRM_COMPILE_LEDGER`` names another file, or ``off`` for
none: nothing read, nothing written): ``compile-ledger.json``, a mapping from a :func:`ledger_key`
(device and its model, torch version, precision, threads, the network's shape and depth, the rows a
micro-batch) to a :class:`CompileRecord` of the seconds last measured there. Runs write it as
they end (the ``compile-ledger`` plugin) and ``trm bench`` writes what it timed, so a machine
learns its own figures: the first run of a shape trains as the rule's priors say, the next ones
as measured.

Reading never fails a run: a missing, damaged or unreadable ledger reads as empty, and a write
that fails (a read-only cache) is skipped. Writes replace the file whole (a temporary file
renamed over it), so a reader never sees half a file; two runs ending together may drop one
run's figures, never corrupt the file.

torch's own on-disk compile caches (Inductor's FX-graph cache and AOTAutograd's cache) make a
shape compiled once on a machine cheap to compile again. :func:`use_persistent_compile_cache`
points them at trm's cache directory (``inductor/``) unless the user set
``TORCHINDUCTOR_CACHE_DIR``, so they outlive ``/tmp``, where torch keeps them by default.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from attrs import frozen

from trm.paths import cache_dir

LEDGER_FILE = "compile-ledger.json"
LEDGER_ENV = "TRM_COMPILE_LEDGER"
LEDGER_VERSION = 1
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
INDUCTOR_CACHE_SUBDIR = "inductor"


@frozen
class CompileRecord:
    """The last measured figures of one ledger key; None where not measured yet.

    ``eager_step_s`` / ``compiled_step_s``: the median seconds of a training step once warm;
    ``compile_s``: the seconds compiling added to the first steps of a compiled run, with
    ``compile_cache`` what torch's on-disk cache answered then (``warm``: every graph was
    found, ``cold``: some were compiled anew, ``unknown``)."""

    eager_step_s: float | None = None
    compiled_step_s: float | None = None
    compile_s: float | None = None
    compile_cache: str = "unknown"

    def merged(self, **measured: Any) -> CompileRecord:
        """This record with the measured figures given (None values leave a figure as it
        was)."""
        return attrs.evolve(self, **{k: v for k, v in measured.items() if v is not None})


def ledger_path() -> Path | None:
    """The ledger's file; None when ``TRM_COMPILE_LEDGER=off``."""
    chosen = os.environ.get(LEDGER_ENV)
    if chosen == "off":
        return None
    return Path(chosen) if chosen else cache_dir() / LEDGER_FILE


def ledger_key(
    *,
    device: str,
    device_model: str,
    precision: str,
    threads: int,
    arch: Any,
    positions: int,
    micro_batch: int,
) -> str:
    """The identity of a measurement: what makes a step's cost differ on one machine. The
    depth is part of it: the compiled unit is the recursion unrolled at the spec's depth
    (:mod:`trm.model.region`), so both its compile seconds and its step grow with it."""
    mixing = "mlp_t" if arch.mlp_t else f"attention {arch.num_heads} heads"
    return (
        f"{device} {device_model} | torch {torch.__version__} | {precision} | "
        f"threads {threads} | hidden {arch.hidden_size} x{arch.expansion} "
        f"L_layers {arch.L_layers} {mixing} | depth H{arch.H_cycles} L{arch.L_cycles} | "
        f"positions {positions} | rows {micro_batch}"
    )


def read_ledger(path: Path | None = None) -> dict[str, CompileRecord]:
    """Every record of the ledger; empty when it is missing, damaged, unreadable or off."""
    path = path or ledger_path()
    if path is None:
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        return {}
    return {key: record for key, raw in entries.items() if (record := _record(raw)) is not None}


def lookup(key: str, path: Path | None = None) -> CompileRecord | None:
    return read_ledger(path).get(key)


def record_measurement(key: str, path: Path | None = None, **measured: Any) -> bool:
    """Merge ``measured`` (CompileRecord's fields) into the record of ``key``; False when the
    ledger could not be written (the run goes on)."""
    path = path or ledger_path()
    if path is None:
        return False
    entries = read_ledger(path)
    entries[key] = entries.get(key, CompileRecord()).merged(**measured)
    document = {
        "version": LEDGER_VERSION,
        "entries": {k: attrs.asdict(v) for k, v in sorted(entries.items())},
    }
    partial: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=".ledger-", suffix=".tmp", delete=False
        ) as handle:
            partial = Path(handle.name)
            json.dump(document, handle, indent=1)
            handle.write("\n")
        os.replace(partial, path)
    except OSError:
        if partial is not None:
            partial.unlink(missing_ok=True)
        return False
    return True


def _record(raw: object) -> CompileRecord | None:
    if not isinstance(raw, Mapping):
        return None
    values: dict[str, Any] = {}
    for name in ("eager_step_s", "compiled_step_s", "compile_s"):
        value = raw.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            values[name] = float(value)
    cache = raw.get("compile_cache")
    if cache in ("warm", "cold", "unknown"):
        values["compile_cache"] = cache
    return CompileRecord(**values)


def use_persistent_compile_cache() -> Path:
    """Point torch's on-disk compile caches at trm's cache directory unless the user chose a
    place (``TORCHINDUCTOR_CACHE_DIR``); returns the directory in use."""
    chosen = os.environ.get(INDUCTOR_CACHE_ENV)
    if chosen:
        return Path(chosen)
    folder = cache_dir() / INDUCTOR_CACHE_SUBDIR
    os.environ[INDUCTOR_CACHE_ENV] = str(folder)
    return folder


def compile_cache_counts() -> dict[str, int]:
    """torch's on-disk cache hits and misses so far in this process (Inductor's FX-graph
    cache and AOTAutograd's), from torch's counters; zeros where torch keeps none."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - every torch trm supports has them
        return {"hits": 0, "misses": 0}
    inductor, aot = counters["inductor"], counters["aot_autograd"]
    hits = inductor["fxgraph_cache_hit"] + aot["autograd_cache_hit"]
    misses = inductor["fxgraph_cache_miss"] + aot["autograd_cache_miss"]
    return {"hits": int(hits), "misses": int(misses)}


def cache_answer(before: Mapping[str, int], after: Mapping[str, int]) -> str:
    """``warm`` when every graph compiled between the two counts was found on disk, ``cold``
    when some were compiled anew, ``unknown`` when torch counted none."""
    hits = after["hits"] - before["hits"]
    misses = after["misses"] - before["misses"]
    if misses > 0:
        return "cold"
    return "warm" if hits > 0 else "unknown"
