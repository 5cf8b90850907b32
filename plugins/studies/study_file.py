"""The study file ``trm sweep STUDY.toml`` reads: a base spec, the search space, the
objective, the budget and the pruner.

```toml
[study]
spec = "quickstart"          # a shipped spec's name or a TOML path (relative to this file)
max_steps = 300              # each trial's --max-steps (optional)
trials = 8                   # at most this many trials (a grid: its points, by default)
time_budget_s = 3600         # start no trial after this many seconds (optional)
seed = 0                     # the sampler's seed (each trial's is drawn from it)
heartbeat_s = 30             # a running trial's heartbeat in the storage (optional)
grace_s = 120                # a trial silent this long was cut off: another worker retries it

[study.fixed]                # --set overrides every trial takes
"runtime.precision" = "fp32"

[objective]
metric = "best_exact_accuracy"   # a field of summary.json, or "eval.FIELD" (the last evaluation's)
direction = "maximize"

[pruner]
kind = "median"              # or "none"
startup_trials = 2           # trials finished before any is pruned
warmup_steps = 100           # optimizer steps of a trial before it may be pruned

[space]
"arch.H_cycles" = { grid = [1, 2] }
"arch.L_cycles" = { choices = [2, 3] }
"train.lr" = { low = 1e-4, high = 3e-3, log = true }
"train.lr_warmup_steps" = { low = 0, high = 100, step = 10 }   # an int range
```

A space whose every parameter is a ``grid`` runs each point once (in a fixed order); any other
space is sampled by Optuna's default sampler (TPE), seeded per trial from ``seed`` and the
trial's number, with ``grid`` read as choices.
Everything is checked before a trial starts: each key is a spec key the base spec has (with
each choice's and bound's type checked by the spec reader), the space is not empty, the
objective is a number trm writes, every plugin a swept ``plugins.NAME.KEY`` reaches takes
the values (:func:`check_plugin_keys`), the name is a folder name.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import tomllib

from trm.api.arguments import override_texts
from trm.api.specs import read_spec
from trm.errors import TrmError
from trm.spec import RunSpec, resolve_spec_path

# summary.json's numeric fields a study may optimise (docs/user-guide.md lists them)
SUMMARY_METRICS = (
    "best_exact_accuracy",
    "final_exact_accuracy",
    "final_cell_accuracy",
    "best_value",
    "wall_s",
    "samples",
    "steps",
)
# fields every evaluation row has ("eval.FIELD": the last evaluation's value)
EVAL_METRICS = ("exact_accuracy", "cell_accuracy")
DIRECTIONS = ("maximize", "minimize")
PRUNERS = ("median", "none")
# the most trials one study runs (a grid's points beyond it need study.trials)
MAX_TRIALS = 10_000
# a study's name is its default folder's name (runs/NAME) and the storage's key
MAX_NAME_CHARS = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]*")
HEARTBEAT_S, GRACE_S = 30, 120
# the evaluation field a summary metric follows while a trial runs (what pruning watches)
_FOLLOWS = {
    "best_exact_accuracy": "exact_accuracy",
    "final_exact_accuracy": "exact_accuracy",
    "final_cell_accuracy": "cell_accuracy",
}


@attrs.frozen
class Parameter:
    """One swept spec key: a ``grid`` or ``choices`` (a list of values), or a range
    ``low``..``high`` (ints when both bounds and ``step`` are whole numbers; ``log`` for a
    log scale)."""

    key: str
    kind: str  # "grid", "choices", "int" or "float"
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None

    def suggest(self, trial: Any) -> Any:
        """This parameter's value for an Optuna ``trial`` (a grid point's trial was enqueued
        with its values, which Optuna gives back here)."""
        if self.kind in ("grid", "choices"):
            return trial.suggest_categorical(self.key, list(self.values))
        if self.kind == "int":
            step = int(self.step or 1)
            return trial.suggest_int(
                self.key, int(self.low), int(self.high), step=step, log=self.log
            )
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)

    def describe(self) -> str:
        if self.kind in ("grid", "choices"):
            return f"{self.key} in {list(self.values)}"
        scale = ", log" if self.log else ""
        return f"{self.key} in [{self.low:g}, {self.high:g}]{scale}"


@attrs.frozen
class StudyFile:
    """A checked study file: see the module docstring for each field."""

    path: Path
    name: str
    spec: str
    base: RunSpec = attrs.field(repr=False)
    fixed: tuple[str, ...]
    parameters: tuple[Parameter, ...]
    metric: str
    direction: str
    trials: int
    max_steps: int | None = None
    time_budget_s: float | None = None
    seed: int = 0
    pruner: str = "median"
    startup_trials: int = 2
    warmup_steps: int = 0
    heartbeat_s: int = HEARTBEAT_S
    grace_s: int = GRACE_S

    @property
    def is_grid(self) -> bool:
        """Every parameter is a grid: each point runs once, in order."""
        return all(p.kind == "grid" for p in self.parameters)

    def grid_points(self) -> Iterator[dict[str, Any]]:
        """The points of a grid study one by one, in a fixed order (the last key varies
        fastest); never all at once, as a grid may have more points than memory holds."""
        keys = [p.key for p in self.parameters]
        for values in itertools.product(*(p.values for p in self.parameters)):
            yield dict(zip(keys, values, strict=True))

    def definition(self) -> dict[str, Any]:
        """What a study's stored trials depend on — the space, the objective's metric and
        direction — as plain data, kept in the storage to compare a resumed study with."""
        return {
            "space": {p.key: p.describe() for p in self.parameters},
            "metric": self.metric,
            "direction": self.direction,
        }

    @property
    def eval_metric(self) -> str | None:
        """The evaluation row field pruning watches (None: the objective follows none)."""
        if self.metric.startswith("eval."):
            return self.metric.removeprefix("eval.")
        return _FOLLOWS.get(self.metric)


def read_study_file(path: Path) -> StudyFile:
    """Read and check ``path``; TrmError naming the key and what to write instead."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TrmError(f"study file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrmError(f"study file {path} cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TrmError(f"study file {path} is not valid TOML ({exc})") from None
    where = f"study file {path}"
    _only(data, ("study", "objective", "pruner", "space"), where, "")
    study = _table(data, "study", where, required=True)
    _only(
        study,
        (
            "name",
            "spec",
            "max_steps",
            "trials",
            "time_budget_s",
            "seed",
            "fixed",
            "heartbeat_s",
            "grace_s",
        ),
        where,
        "study.",
    )
    spec_name = _text(study, "spec", where, "study.")
    spec_path = resolve_spec_path(spec_name)
    if (
        not spec_path.is_absolute()
        and not spec_path.exists()
        and (path.parent / spec_name).exists()
    ):
        spec_name = str(path.parent / spec_name)
    fixed = override_texts(_table(study, "fixed", where) or {})
    base = read_spec(spec_name, fixed)
    parameters = tuple(_parameter(key, value, where) for key, value in _space(data, where).items())
    _check_keys(base, parameters, where)
    objective = _table(data, "objective", where, required=True)
    _only(objective, ("metric", "direction"), where, "objective.")
    metric = _text(objective, "metric", where, "objective.")
    if metric not in SUMMARY_METRICS and metric.removeprefix("eval.") not in EVAL_METRICS:
        names = ", ".join((*SUMMARY_METRICS, *(f"eval.{m}" for m in EVAL_METRICS)))
        raise TrmError(
            f"{where}: objective.metric {metric!r} is no number a run writes; choose from {names}"
        )
    direction = objective.get("direction", "maximize")
    if direction not in DIRECTIONS:
        raise TrmError(
            f"{where}: objective.direction must be 'maximize' or 'minimize', not {direction!r}"
        )
    pruner = _table(data, "pruner", where) or {}
    _only(pruner, ("kind", "startup_trials", "warmup_steps"), where, "pruner.")
    kind = pruner.get("kind", "median")
    if kind not in PRUNERS:
        raise TrmError(f"{where}: pruner.kind must be 'median' or 'none', not {kind!r}")
    grid_size = (
        math.prod(len(p.values) for p in parameters)
        if all(p.kind == "grid" for p in parameters)
        else None
    )
    trials = _whole(study, "trials", where, "study.", default=grid_size)
    if trials is None:
        raise TrmError(
            f"{where}: study.trials is missing; say how many trials to run (a grid runs its points)"
        )
    if grid_size is not None:
        trials = min(trials, grid_size)
    time_budget = study.get("time_budget_s")
    if time_budget is not None and (
        isinstance(time_budget, bool)
        or not isinstance(time_budget, (int, float))
        or not time_budget > 0
        or not math.isfinite(time_budget)
    ):
        raise TrmError(
            f"{where}: study.time_budget_s must be a number of seconds above 0, not {time_budget!r}"
        )
    if trials > MAX_TRIALS:
        raise TrmError(
            f"{where}: study.trials is {trials:,}; a study runs at most {MAX_TRIALS:,} trials "
            "(a grid: set study.trials to run its first points)"
        )
    name = _name(study.get("name", path.stem), where)
    heartbeat_s = _whole(study, "heartbeat_s", where, "study.", default=HEARTBEAT_S)
    grace_s = _whole(study, "grace_s", where, "study.", default=max(GRACE_S, 2 * heartbeat_s))
    if not grace_s > heartbeat_s:
        raise TrmError(
            f"{where}: study.grace_s ({grace_s}) must be above study.heartbeat_s ({heartbeat_s}),"
            " or a running trial would be taken for a cut-off one between two heartbeats"
        )
    return StudyFile(
        path=path,
        name=name,
        spec=spec_name,
        base=base,
        fixed=fixed,
        parameters=parameters,
        metric=metric,
        direction=direction,
        trials=trials,
        max_steps=_whole(study, "max_steps", where, "study.", default=None),
        time_budget_s=float(time_budget) if time_budget is not None else None,
        seed=_whole(study, "seed", where, "study.", default=0, least=0),
        pruner=kind,
        startup_trials=_whole(pruner, "startup_trials", where, "pruner.", default=2, least=0),
        warmup_steps=_whole(pruner, "warmup_steps", where, "pruner.", default=0, least=0),
        heartbeat_s=heartbeat_s,
        grace_s=grace_s,
    )


def _name(name: Any, where: str) -> str:
    """A study name that is one folder's name under runs/: letters, digits, ``. _ -`` and
    spaces, starting with a letter or digit, at most MAX_NAME_CHARS characters."""
    if not isinstance(name, str) or not name.strip():
        raise TrmError(f"{where}: study.name must be text, not {name!r}")
    if len(name) > MAX_NAME_CHARS:
        raise TrmError(
            f"{where}: study.name is {len(name)} characters; give at most {MAX_NAME_CHARS}"
        )
    if not _NAME.fullmatch(name):
        raise TrmError(
            f"{where}: study.name {name!r} is not a folder name; use letters, digits, '.', "
            "'_', '-' and spaces, starting with a letter or digit"
        )
    return name


def _only(table: Mapping[str, Any], allowed: tuple[str, ...], where: str, prefix: str) -> None:
    for key in table:
        if key not in allowed:
            raise TrmError(
                f"{where}: unknown key {prefix}{key}; known keys here: {', '.join(allowed)}"
            )


def _table(data: Mapping[str, Any], key: str, where: str, required: bool = False) -> dict | None:
    value = data.get(key)
    if value is None:
        if required:
            raise TrmError(f"{where}: the [{key}] table is missing")
        return None
    if not isinstance(value, dict):
        raise TrmError(f"{where}: {key} must be a table, not {type(value).__name__}")
    return value


def _text(table: Mapping[str, Any], key: str, where: str, prefix: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise TrmError(f"{where}: {prefix}{key} must be text, not {value!r}")
    return value


def _whole(
    table: Mapping[str, Any], key: str, where: str, prefix: str, default: Any, least: int = 1
) -> Any:
    value = table.get(key, default)
    if value is default:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise TrmError(
            f"{where}: {prefix}{key} must be a whole number of at least {least}, not {value!r}"
        )
    return value


def _space(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    space = _table(data, "space", where) or {}
    flat: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            full = f"{prefix}{key}"
            if isinstance(value, dict) and not ({"grid", "choices", "low", "high"} & set(value)):
                walk(value, f"{full}.")
            else:
                flat[full] = value

    walk(space, "")
    if not flat:
        raise TrmError(
            f"{where}: the search space is empty; add a [space] entry, e.g. "
            '"train.lr" = { low = 1e-4, high = 1e-3, log = true }'
        )
    return flat


def _parameter(key: str, value: Any, where: str) -> Parameter:
    at = f"{where}: space.{key}"
    if not isinstance(value, dict):
        raise TrmError(
            f"{at} must be a table such as {{ grid = [1, 2] }} or {{ low = 1, high = 4 }}"
        )
    for name in value:
        if name not in ("grid", "choices", "low", "high", "log", "step"):
            raise TrmError(
                f"{at}: unknown key {name!r}; use grid, choices, or low/high (log, step)"
            )
    if "grid" in value or "choices" in value:
        kind = "grid" if "grid" in value else "choices"
        values = value[kind]
        if not isinstance(values, list) or not values:
            raise TrmError(f"{at}: {kind} must be a non-empty list of values")
        if len({repr(v) for v in values}) != len(values):
            raise TrmError(f"{at}: {kind} repeats a value")
        if set(value) - {kind}:
            raise TrmError(f"{at}: give {kind} alone, or low/high")
        return Parameter(key=key, kind=kind, values=tuple(values))
    low, high, log, step = (
        value.get("low"),
        value.get("high"),
        value.get("log", False),
        value.get("step"),
    )
    numbers = [v for v in (low, high, step) if v is not None]
    if (
        low is None
        or high is None
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in numbers)
    ):
        raise TrmError(f"{at}: a range needs numbers low and high (and optionally step, log)")
    if not all(math.isfinite(v) for v in numbers) or not low < high:
        raise TrmError(f"{at}: low must be below high, both finite; got {low}..{high}")
    if not isinstance(log, bool):
        raise TrmError(f"{at}: log is true or false, not {log!r}")
    if log and (low <= 0 or step is not None):
        raise TrmError(f"{at}: a log range needs low above 0 and no step")
    if step is not None and not step > 0:
        raise TrmError(f"{at}: step must be above 0, not {step}")
    whole = all(isinstance(v, int) for v in numbers)
    return Parameter(
        key=key, kind="int" if whole else "float", low=low, high=high, log=log, step=step
    )


def _check_keys(base: RunSpec, parameters: tuple[Parameter, ...], where: str) -> None:
    """Each swept key is a spec key, and each value the space can give is one the spec takes
    (the choices, and both bounds of a range), by applying them as ``--set`` does."""
    for parameter in parameters:
        for sample in _samples(parameter):
            try:
                read_spec(base, override_texts({parameter.key: sample}))
            except TrmError as exc:
                message = str(exc).removeprefix("--set ")
                raise TrmError(f"{where}: space.{parameter.key}: {message}") from None


def check_plugin_keys(study_file: StudyFile, plugins: tuple[str, ...] = ()) -> None:
    """Every value the space can give is one the run's plugins take: each is applied to the
    base spec and the plugins it switches on (with ``plugins``, the ``--plugins`` values)
    check it as before a run (``check_spec``) — so a ``plugins.NAME.KEY`` the plugin does not
    take is refused before any trial, not by each trial."""
    from trm.api.specs import check_spec_with_plugins
    from trm.plugin_manager import load_plugins

    where = f"study file {study_file.path}"
    managers: dict[tuple[str, ...], Any] = {}
    for parameter in study_file.parameters:
        for sample in _samples(parameter):
            spec = read_spec(study_file.base, override_texts({parameter.key: sample}))
            tables = tuple(sorted(spec.plugins))
            if tables not in managers:
                managers[tables] = load_plugins(plugins, spec_tables=tables)
            try:
                check_spec_with_plugins(managers[tables], spec)
            except TrmError as exc:
                message = str(exc).removeprefix("spec: ")
                raise TrmError(f"{where}: space.{parameter.key} = {sample!r}: {message}") from None


def _samples(parameter: Parameter) -> tuple[Any, ...]:
    """The values of ``parameter`` that stand for all it can give: its choices, or both
    bounds of its range."""
    if parameter.values:
        return parameter.values
    return (_bound(parameter, parameter.low), _bound(parameter, parameter.high))


def _bound(parameter: Parameter, value: float) -> Any:
    return int(value) if parameter.kind == "int" else float(value)
