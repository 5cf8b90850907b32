"""Everything a command does before the loop: hardware, runtime, estimate, adaptation, data.

Each function calls one hook (or a few) and turns its answers into the core's types; the
commands (``trm run``, ``trm eval``, …) compose them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from trm.data.source import DataSource
from trm.errors import TrmError
from trm.hardware import HardwareProfile, merge_profiles
from trm.memory import MemoryEstimate, collect_estimate
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import CONVERTER, RunSpec, structure_strict

MODES = ("conservative", "balanced", "extreme")


def detect_hardware(pm: TrmPluginManager) -> HardwareProfile:
    """One profile merged from every plugin's ``detect_hardware`` part."""
    return merge_profiles(pm.hook.detect_hardware())


def choose_runtime(pm: TrmPluginManager, spec: RunSpec, hardware: HardwareProfile) -> RuntimeChoice:
    """The first backend plugin's answer to ``configure_runtime``."""
    choice = pm.hook.configure_runtime(spec=spec, hardware=hardware)
    if choice is None:
        raise TrmError(
            f"no backend plugin can run runtime.device={spec.runtime.device!r} here; "
            "use runtime.device='auto' or enable the backend plugin (trm plugins lists them)"
        )
    return choice


def estimate_memory(
    pm: TrmPluginManager, spec: RunSpec, hardware: HardwareProfile, runtime: RuntimeChoice
) -> MemoryEstimate:
    return collect_estimate(pm.hook.estimate_memory(spec=spec, hardware=hardware, runtime=runtime))


def adapt_spec(
    pm: TrmPluginManager,
    spec: RunSpec,
    hardware: HardwareProfile,
    estimate: MemoryEstimate,
    mode: str,
) -> tuple[RunSpec, list[dict[str, Any]]]:
    """Run the ``adapt_config`` chain; returns the final spec and every recorded change."""
    results = pm.call_chained(
        "adapt_config", "spec", spec=spec, hardware=hardware, estimate=estimate, mode=mode
    )
    changes: list[dict[str, Any]] = []
    for new_spec, plugin_changes in results:
        spec = new_spec
        changes.extend(
            {"key": key, "old": old, "new": new, "reason": reason}
            for key, old, new, reason in plugin_changes
        )
    return spec, changes


def data_sources(pm: TrmPluginManager) -> dict[str, DataSource]:
    """All registered sources by name; a name offered twice is an error."""
    found: dict[str, DataSource] = {}
    for sources in pm.hook.register_data_sources():
        for source in sources or ():
            if source.name in found:
                raise TrmError(
                    f"two plugins provide the data source {source.name!r}; "
                    "switch one off with --plugins no:NAME"
                )
            found[source.name] = source
    return found


def find_data_source(pm: TrmPluginManager, name: str) -> DataSource:
    sources = data_sources(pm)
    if name not in sources:
        known = ", ".join(sorted(sources)) or "none (is a data plugin switched off?)"
        raise TrmError(f"data.source: unknown data source {name!r}; known: {known}")
    return sources[name]


def build_options(source: DataSource, table: dict[str, Any], where: str) -> Any:
    """Structure a ``[data.generate]`` table into the source's options class."""
    return structure_strict(table, source.options_type, where, root="data.generate")


def ensure_dataset(
    pm: TrmPluginManager, spec: RunSpec, run_dir: Path, log: Callable[[str], None]
) -> Path:
    """The dataset directory the run reads: ``data.dir``, or one built into ``run_dir/data``.

    A built dataset is reused when ``run_dir/data/build.json`` records the same source,
    options and seed; otherwise it is rebuilt into a temporary directory and moved in place,
    so an interrupted build never leaves a half-written dataset behind.
    """
    source = find_data_source(pm, spec.data.source)
    if spec.data.dir:
        path = Path(spec.data.dir).expanduser()
        if not path.is_dir():
            raise TrmError(
                f"data.dir: data directory {path} does not exist; build one with "
                f"`trm data build {spec.data.source} --out {path}` or fix data.dir"
            )
        return path.resolve()
    options = build_options(source, spec.data.generate, "data.generate")
    recipe = {
        "source": source.name,
        "options": CONVERTER.unstructure(options),
        "seed": spec.train.seed,
    }
    data_dir = run_dir / "data"
    marker = data_dir / "build.json"
    if marker.exists():
        try:
            if json.loads(marker.read_text()) == recipe:
                return data_dir.resolve()
        except (OSError, json.JSONDecodeError):
            pass
    log(f"building {source.name} data into {data_dir} …")
    staging = run_dir / "data.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    source.build(options, staging, spec.train.seed, log)
    (staging / "build.json").write_text(json.dumps(recipe, indent=2))
    shutil.rmtree(data_dir, ignore_errors=True)
    staging.rename(data_dir)
    return data_dir.resolve()


def recipe_digest(recipe: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def profile_to_dict(hardware: HardwareProfile) -> dict[str, Any]:
    return attrs.asdict(hardware)
