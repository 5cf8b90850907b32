"""The report's plots: what each PNG shows (:func:`plot_specs`) and drawing it (:func:`render`).

Drawing uses matplotlib's Agg canvas directly (no pyplot, no display, no global backend
change), so it works on a server and leaves the caller's matplotlib alone. Each plot is one
PNG of stacked panels sharing an x axis; each panel draws one line per series — a run's
metric — and :func:`render` returns what was drawn (label, colour, number of points, read
back from the figure's own lines), which the report writes to plots.json. Several runs
overlay in the same panels, named in the legend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import field, frozen
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from trm.plugins.report.runs import Run

# Distinct colours per series within a panel (matplotlib's tab10, then tab20's lighter half).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
)  # fmt: skip
# The memory estimate's promise: within 10% of the measured peak (benchmarks/memory_accuracy.py).
ESTIMATE_BAND = 0.10
MAX_POINTS = 4000  # a longer series is drawn as the means of equal bins
DPI = 100
# Eval-row keys that are not task metrics (those get their own plot).
EVAL_KEYS = {
    "kind", "step", "examples", "exact_accuracy", "cell_accuracy", "loss", "mean_halt_steps",
    "q_halt_accuracy", "wall_s",
}  # fmt: skip
# Eval-row keys of an exploration (trm.evaluation.explore), drawn by the exploration plot.
EXPLORATION_KEYS = ("explore@", "oracle_", "trajectories_")


@frozen
class Trace:
    """One series: ``style`` is "train" (a line), "eval" (dashed with markers), "limit" (a
    dotted level, such as a memory estimate) or "events" (markers only)."""

    label: str
    run: str
    xs: list[float]
    ys: list[float]
    style: str = "train"
    band: float = 0.0  # a "limit" shaded ±band (a fraction) around it: the promise it keeps


@frozen
class Panel:
    title: str
    ylabel: str
    traces: list[Trace]
    log_y: bool = False
    categories: list[str] = field(factory=list)  # y tick labels of an events panel


@frozen
class PlotSpec:
    """One PNG: ``file``, a ``title``, the x axis label, its panels (only those with data)."""

    file: str
    title: str
    xlabel: str
    panels: list[Panel]
    log_x: bool = False  # a base-2 log x axis (trajectories per puzzle)


# ------------------------------------------------------------------------------ data


def _name(run: Run, metric: str, several: bool) -> str:
    return f"{run.label}: {metric}" if several else metric


def _train_points(
    run: Run, x: Callable[[dict[str, Any]], float | None], key: str, halted_only: bool = False
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in run.train:
        value = row.get(key)
        if not isinstance(value, (int, float)) or value != value:
            continue
        if halted_only and not row.get("halted"):
            continue  # no row halted in that step: its accuracies are not measured
        position = x(row)
        if position is not None:
            xs.append(float(position))
            ys.append(float(value))
    return xs, ys


def _eval_points(
    run: Run, x: Callable[[dict[str, Any]], float | None], key: str
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for row in run.evals:
        value = row.get(key)
        position = x(row)
        if isinstance(value, (int, float)) and position is not None:
            xs.append(float(position))
            ys.append(float(value))
    return xs, ys


def _at_step(run: Run, key: str) -> Callable[[dict[str, Any]], float | None]:
    """An x position for any row: the value of ``key`` in the training row of its step."""
    by_step = {row["step"]: row.get(key) for row in run.train}

    def position(row: dict[str, Any]) -> float | None:
        if key == "step":
            return row["step"]
        value = by_step.get(row["step"])
        if value is None and key == "wall_s":
            return run.wall_s_at(row["step"])
        return value

    return position


def _time_scale(runs: list[Run]) -> tuple[float, str]:
    longest_s = max((run.train[-1]["wall_s"] for run in runs if run.train), default=0.0)
    return (3600.0, "training time (h)") if longest_s > 3 * 3600 else (60.0, "training time (min)")


def _traces(
    runs: list[Run],
    x_key: str,
    metrics: list[tuple[str, str, str, bool]],
    scale: float = 1.0,
) -> list[Trace]:
    """Traces for ``metrics``: (label, "train" or "eval", row key, halted rows only)."""
    several = len(runs) > 1
    out = []
    for run in runs:
        at = _at_step(run, x_key)

        def x(row: dict[str, Any], at: Callable = at) -> float | None:
            value = at(row)
            return None if value is None else value / scale

        for label, kind, key, halted_only in metrics:
            if kind == "train":
                xs, ys = _train_points(run, x, key, halted_only)
            else:
                xs, ys = _eval_points(run, x, key)
            if xs:
                out.append(Trace(_name(run, label, several), run.label, xs, ys, kind))
    return out


def _accuracy_panels(runs: list[Run], x_key: str, scale: float = 1.0) -> list[Panel]:
    exact = [
        ("train exact", "train", "train_exact_accuracy", True),
        ("eval exact", "eval", "exact_accuracy", False),
    ]
    cells = [
        ("train cell", "train", "train_cell_accuracy", True),
        ("eval cell", "eval", "cell_accuracy", False),
    ]
    return [
        Panel("exact accuracy", "share of puzzles", _traces(runs, x_key, exact, scale)),
        Panel("cell accuracy", "share of cells", _traces(runs, x_key, cells, scale)),
    ]


def _task_metric_names(runs: list[Run]) -> list[str]:
    names: set[str] = set()
    for run in runs:
        for row in run.evals:
            names.update(
                k
                for k, v in row.items()
                if k not in EVAL_KEYS
                and not k.startswith(EXPLORATION_KEYS)
                and isinstance(v, (int, float))
            )
    return sorted(names)


def _limit_traces(runs: list[Run], location: str, key: str) -> list[Trace]:
    """A dotted level per run at its estimated peak for ``location`` (estimate.json), in the
    band of ±ESTIMATE_BAND the estimate promises (so the axis never zooms a small gap into a
    chasm)."""
    several = len(runs) > 1
    out = []
    for run in runs:
        total = (run.estimate or {}).get(f"{location}_total_bytes")
        has_data = any(isinstance(r.get(key), (int, float)) for r in run.train)
        if total and has_data:
            steps = [run.train[0]["step"], run.train[-1]["step"]]
            level = total / 2**20
            label = _name(run, f"{location} estimate", several)
            xs = [float(s) for s in steps]
            out.append(Trace(label, run.label, xs, [level, level], "limit", ESTIMATE_BAND))
    return out


def _event_category(event: dict[str, Any]) -> str:
    name = str(event.get("event", "event")).replace("_", " ")
    return f"{name} {event['level']}" if name == "thermal" and event.get("level") else name


def _events_panel(runs: list[Run], scale: float) -> Panel | None:
    categories = sorted({_event_category(e) for run in runs for e in run.events})
    if not categories:
        return None
    several = len(runs) > 1
    traces = []
    for run in runs:
        for index, category in enumerate(categories):
            xs = []
            for event in run.events:
                if _event_category(event) == category:
                    wall_s = run.wall_s_at(event["step"])
                    xs.append((wall_s or 0.0) / scale)
            if xs:
                label = _name(run, category, several)
                traces.append(Trace(label, run.label, xs, [float(index)] * len(xs), "events"))
    return Panel("events", "", traces, categories=categories)


LOSS = [("train loss", "train", "loss", False), ("eval loss", "eval", "loss", False)]
HALT_STEPS = [
    ("train", "train", "mean_halt_steps", True),
    ("eval (first step the Q head halts)", "eval", "mean_halt_steps", False),
]
Q_HALT = [
    ("train", "train", "train_q_halt_accuracy", True),
    ("eval", "eval", "q_halt_accuracy", False),
]


def _train_metric(
    runs: list[Run], label: str, key: str, x_key: str = "step", scale: float = 1.0
) -> list[Trace]:
    return _traces(runs, x_key, [(label, "train", key, False)], scale)


def _loss_plot(runs: list[Run]) -> PlotSpec:
    return PlotSpec(
        "loss.png",
        "Loss and learning rate",
        "step",
        [
            Panel("loss", "loss per example", _traces(runs, "step", LOSS), log_y=True),
            Panel("learning rate", "lr", _train_metric(runs, "learning rate", "lr")),
        ],
    )


def _task_plot(runs: list[Run]) -> PlotSpec:
    metrics = [(name.replace("_", " "), "eval", name, False) for name in _task_metric_names(runs)]
    panel = Panel("task metrics", "value", _traces(runs, "samples", metrics))
    return PlotSpec("task_metrics.png", "Task metrics (evaluation)", "samples", [panel])


def _throughput_plot(runs: list[Run]) -> PlotSpec:
    return PlotSpec(
        "throughput.png",
        "Speed and data wait",
        "step",
        [
            Panel("samples/s", "samples/s", _train_metric(runs, "samples/s", "samples_per_s")),
            Panel("data wait", "seconds per step", _train_metric(runs, "data wait", "data_wait_s")),
        ],
    )


def _memory_plot(runs: list[Run]) -> PlotSpec:
    host = _train_metric(runs, "host memory", "mem_host_mb")
    device = _train_metric(runs, "device memory", "mem_device_mb")
    return PlotSpec(
        "memory.png",
        "Memory against the run's estimate",
        "step",
        [
            Panel(
                "host memory (resident)",
                "MB",
                host + _limit_traces(runs, "host", "mem_host_mb"),
            ),
            Panel(
                "device memory (peak of each step)",
                "MB",
                device + _limit_traces(runs, "device", "mem_device_mb"),
            ),
        ],
    )


def _halting_plot(runs: list[Run]) -> PlotSpec:
    return PlotSpec(
        "halting.png",
        "Halting: supervision steps and the Q head",
        "step",
        [
            Panel("mean halting steps", "supervision steps", _traces(runs, "step", HALT_STEPS)),
            Panel("q-halt accuracy", "share right", _traces(runs, "step", Q_HALT)),
        ],
    )


def _events_plot(runs: list[Run], scale: float, time_label: str) -> PlotSpec | None:
    events = _events_panel(runs, scale)
    if events is None:
        return None
    speed = _train_metric(runs, "samples/s", "samples_per_s", "wall_s", scale)
    panels = [Panel("samples/s", "samples/s", speed), events]
    return PlotSpec("events.png", "Events over training time", time_label, panels)


def plot_specs(runs: list[Run]) -> list[PlotSpec]:
    """Every plot the runs have data for (panels without data are left out)."""
    scale, time_label = _time_scale(runs)
    plots = [
        _loss_plot(runs),
        PlotSpec(
            "accuracy_by_samples.png",
            "Accuracy by samples seen",
            "samples",
            _accuracy_panels(runs, "samples"),
        ),
        PlotSpec(
            "accuracy_by_time.png",
            "Accuracy by training time",
            time_label,
            _accuracy_panels(runs, "wall_s", scale),
        ),
        _task_plot(runs),
        _throughput_plot(runs),
        _memory_plot(runs),
        _halting_plot(runs),
        _events_plot(runs, scale, time_label),
    ]
    out = []
    for plot in plots:
        panels = [panel for panel in plot.panels if panel.traces] if plot else []
        if plot is not None and panels:
            out.append(PlotSpec(plot.file, plot.title, plot.xlabel, panels, plot.log_x))
    return out


# ------------------------------------------------------------------------------ drawing


def _thin(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """At most MAX_POINTS points: the means of equal bins of a longer series."""
    if len(xs) <= MAX_POINTS:
        return xs, ys
    bins = MAX_POINTS // 2
    size = len(xs) / bins
    out_x, out_y = [], []
    for index in range(bins):
        a, b = int(index * size), int((index + 1) * size)
        out_x.append(sum(xs[a:b]) / (b - a))
        out_y.append(sum(ys[a:b]) / (b - a))
    return out_x, out_y


def _draw(ax: Any, trace: Trace, color: str) -> None:
    xs, ys = _thin(trace.xs, trace.ys)
    if trace.style == "eval":
        ax.plot(xs, ys, "--o", color=color, label=trace.label, linewidth=1.8, markersize=4)
    elif trace.style == "limit":
        ax.plot(xs, ys, ":", color=color, label=trace.label, linewidth=2.0)
        if trace.band > 0:
            low = [y * (1 - trace.band) for y in ys]
            high = [y * (1 + trace.band) for y in ys]
            ax.fill_between(
                xs, low, high, color=color, alpha=0.15, label=f"{trace.label} ±{trace.band:.0%}"
            )
    elif trace.style == "events":
        ax.plot(xs, ys, "o", color=color, label=trace.label, markersize=6, linestyle="none")
    else:
        ax.plot(xs, ys, "-", color=color, label=trace.label, linewidth=1.5)


def render(plot: PlotSpec, out_dir: Path) -> dict[str, Any]:
    """Draw ``plot`` to ``out_dir / plot.file``; returns its manifest entry: the file, the
    title and, per panel, every line drawn (label, run, colour, number of points), read
    back from the figure, the y axis's range, the shaded bands (label, low, high) and the
    panel's box in the PNG (``box_px``: x0, y0, x1, y1 in
    pixels from the top left)."""
    figure = Figure(figsize=(9.0, 0.6 + 3.0 * len(plot.panels)), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(plot.panels), 1, squeeze=False, sharex=True)[:, 0]
    manifest_panels = []
    for ax, panel in zip(axes, plot.panels, strict=True):
        for index, trace in enumerate(panel.traces):
            _draw(ax, trace, PALETTE[index % len(PALETTE)])
        values = [y for trace in panel.traces for y in trace.ys]
        if panel.log_y and min(values) > 0 and max(values) > 10 * min(values):
            ax.set_yscale("log")  # only when the values span more than a decade
        if panel.categories:
            ax.set_yticks(range(len(panel.categories)), panel.categories)
            ax.set_ylim(-0.5, len(panel.categories) - 0.5)
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        runs_of = {trace.label: trace.run for trace in panel.traces}
        manifest_panels.append(
            {
                "title": panel.title,
                "lines": [
                    {
                        "label": line.get_label(),
                        "run": runs_of.get(line.get_label(), ""),
                        "color": to_hex(line.get_color()),
                        "points": len(line.get_xdata()),
                    }
                    for line in ax.get_lines()
                ],
                "y_range": [float(v) for v in ax.get_ylim()],
                "bands": [
                    {
                        "label": trace.label,
                        "low": trace.ys[0] * (1 - trace.band),
                        "high": trace.ys[0] * (1 + trace.band),
                    }
                    for trace in panel.traces
                    if trace.band > 0 and trace.ys
                ],
            }
        )
    if plot.log_x:
        axes[-1].set_xscale("log", base=2)
    axes[-1].set_xlabel(plot.xlabel)
    figure.suptitle(plot.title)
    figure.tight_layout()
    figure.savefig(out_dir / plot.file, dpi=DPI)
    height_px = figure.bbox.height
    for ax, entry in zip(axes, manifest_panels, strict=True):
        box = ax.get_window_extent()  # where the panel lies in the PNG, from its top left
        entry["box_px"] = [
            round(box.x0, 1),
            round(height_px - box.y1, 1),
            round(box.x1, 1),
            round(height_px - box.y0, 1),
        ]
    return {"file": plot.file, "title": plot.title, "panels": manifest_panels}
