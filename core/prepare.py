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
from trm.dataset_shape import resolve_shape
from trm.errors import TrmError
from trm.hardware import HardwareProfile, merge_profiles
from trm.memory import DatasetShape, MemoryEstimate, collect_estimate
from trm.plugin_manager import TrmPluginManager
from trm.runtime import RuntimeChoice
from trm.spec import CONVERTER, RunSpec, structure_strict

MODES = ("conservative", "balanced", "extreme")
# Share of the usable memory budget each tier plans a run's peak to take.
MODE_TARGETS = {"conservative": 0.50, "balanced": 0.75, "extreme": 0.95}
EXTREME_RISKS = (
    "extreme mode plans 95% of the memory budget: little room is left for other programs, "
    "so the system may swap (slow) or kill the run for lack of memory; a long run at full "
    "load keeps the machine hot and may throttle its clocks (see the thermal plugin)"
)


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


def device_budget_bytes(hardware: HardwareProfile, runtime: RuntimeChoice) -> int | None:
    """The accelerator memory a run on ``runtime.device`` may use; None on the CPU."""
    device = runtime.device
    if device.startswith("cuda"):
        index = int(device.split(":")[1]) if ":" in device else 0
        for gpu in hardware.gpus or ():
            if gpu.index == index and gpu.memory_total_bytes:
                return gpu.memory_total_bytes
        return hardware.cuda_memory_bytes
    if device == "mps":
        return hardware.memory_budget_bytes
    return None


def dataset_shape(
    pm: TrmPluginManager,
    spec: RunSpec,
    run_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> DatasetShape:
    """The train split's shape for ``spec`` (see :mod:`trm.dataset_shape`).

    With ``run_dir`` (``trm run``) data that must be built are built there, where the run
    reads them, rather than in a temporary directory.
    """

    def build(directory: Path) -> Path:
        return ensure_dataset(pm, spec, directory, log or (lambda _m: None))

    source = find_data_source(pm, spec.data.source)
    return resolve_shape(spec, source, run_dir, log, build if run_dir is not None else None)


def estimate_memory(
    pm: TrmPluginManager,
    spec: RunSpec,
    hardware: HardwareProfile,
    runtime: RuntimeChoice,
    dataset: DatasetShape | None = None,
    log: Callable[[str], None] | None = None,
    run_dir: Path | None = None,
) -> MemoryEstimate:
    """Every plugin's items for ``spec``, with the host and device budgets.

    The estimate can be remade for another spec (``MemoryEstimate.for_spec``): the runtime is
    re-chosen when the spec's precision, device or threads differ, the dataset is kept.
    """
    shape = dataset if dataset is not None else dataset_shape(pm, spec, run_dir, log)

    def make(candidate: RunSpec) -> MemoryEstimate:
        chosen = runtime
        if candidate.runtime != spec.runtime:
            chosen = choose_runtime(pm, candidate, hardware)
        parts = pm.hook.estimate_memory(
            spec=candidate, hardware=hardware, runtime=chosen, dataset=shape
        )
        return collect_estimate(
            parts,
            host_budget_bytes=hardware.memory_budget_bytes,
            device_budget_bytes=device_budget_bytes(hardware, chosen),
            unified_memory=bool(hardware.unified_memory) and chosen.device == "mps",
            remake=make,
        )

    return make(spec)


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
