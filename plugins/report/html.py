"""index.html: the report's page — the summary table, what the detectors found, the spec keys
that differ between the runs, and every plot. Self-contained: inline style, images by
relative name, no script and nothing fetched from the network."""

from __future__ import annotations

from html import escape
from typing import Any

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.82em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.45em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
.finding { background: #fff4e5; border-left: 4px solid #f0a020; padding: 0.5em 1em; }
.ok { color: #2a7a2a; }
img { max-width: 100%; border: 1px solid #eee; }
figure { margin: 1.5em 0; }
"""

COLUMNS = (
    ("run", "run"),
    ("steps", "steps"),
    ("samples", "samples"),
    ("wall_s", "wall time"),
    ("final_exact_accuracy", "final exact"),
    ("final_retried_exact_accuracy", "final exact, K attempts"),
    ("best_exact_accuracy", "best exact"),
    ("final_cell_accuracy", "final cell"),
    ("best_cell_accuracy", "best cell"),
    ("samples_per_s", "samples/s (median)"),
    ("peak_host_mb", "peak host MB"),
    ("host_estimate_mb", "host estimate MB"),
    ("peak_device_mb", "peak device MB"),
    ("device_estimate_mb", "device estimate MB"),
    ("stopped", "stopped"),
)


TASK_COLUMNS = ("exact_accuracy", "cell_accuracy", "examples")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _shown(key: str, summary: dict[str, Any]) -> str:
    """A run's ``key`` as its table cell; the exact accuracy of K attempts names its K."""
    value = summary.get(key)
    if key == "final_retried_exact_accuracy" and value is not None:
        return f"{value:.2%} (K={summary.get('eval_attempts')})"
    return _cell(key, value)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "–"
    if key == "wall_s":
        return _duration(value)
    if key.endswith("accuracy"):
        return f"{value:.2%}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return escape(str(value))


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _value(value: Any) -> str:
    return "–" if value is None else escape(repr(value) if isinstance(value, str) else str(value))


def render_index(
    summaries: list[dict[str, Any]],
    differences: list[tuple[str, list[Any]]],
    plots: list[dict[str, Any]],
) -> str:
    """The page for the runs' ``summaries`` (summary.run_summary), the spec ``differences``
    (runs.spec_differences) and the rendered ``plots`` (plots.render's entries)."""
    labels = [s["run"] for s in summaries]
    parts = [
        *_head(f"trm report: {escape(', '.join(labels))}"),
        "<h2>Summary</h2>",
        _table(
            [title for _, title in COLUMNS],
            [[_shown(key, s) for key, _ in COLUMNS] for s in summaries],
        ),
    ]
    tasks = [(s["run"], task, f) for s in summaries for task, f in s.get("tasks", {}).items()]
    if tasks:  # runs of a multi-task mix: the last evaluation of each task
        parts.append("<h2>Each task</h2>")
        rows = [
            [escape(run), escape(task), *(_cell(k, f.get(k)) for k in TASK_COLUMNS)]
            for run, task, f in tasks
        ]
        parts.append(_table(["run", "task", "final exact", "final cell", "examples"], rows))
    parts.append("<h2>Checks</h2>")
    for summary in summaries:
        for switch in summary.get("activation_checkpointing_switches", []):
            parts.append(
                f"<p>{escape(summary['run'])}: activation checkpointing "
                f"{'on' if switch['on'] else 'off'} from step {switch['step']} — "
                f"{escape(switch['reason'])}.</p>"
            )
        findings = summary["findings"]
        if not findings:
            parts.append(
                f'<p class="ok">{escape(summary["run"])}: no steady memory growth, no slowdown.</p>'
            )
        for finding in findings:
            parts.append(
                f'<p class="finding"><b>{escape(summary["run"])}: {escape(finding["kind"])} '
                f"from step {finding['step']}</b> — {escape(finding['message'])}.<br>"
                f"Suggestion: {escape(finding['suggestion'])}.</p>"
            )
    if len(summaries) > 1:
        parts.append("<h2>Spec keys that differ</h2>")
        if differences:
            rows = [[escape(key), *(_value(v) for v in values)] for key, values in differences]
            parts.append(_table(["key", *(escape(label) for label in labels)], rows))
        else:
            parts.append("<p>The runs' specs are the same.</p>")
    parts += _figures(plots)
    return "\n".join(parts) + "\n"


def _head(title: str) -> list[str]:
    """The page's start, up to its heading ``title`` (already escaped)."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{title}</h1>",
    ]


def _figures(plots: list[dict[str, Any]]) -> list[str]:
    """The page's plots section and its end."""
    parts = ["<h2>Plots</h2>"]
    for plot in plots:
        name = escape(plot["file"])
        title = escape(plot["title"])
        parts.append(
            f'<figure><img src="{name}" alt="{title}"><figcaption>{title} '
            f"({name})</figcaption></figure>"
        )
    parts.append("</body></html>")
    return parts


EVALUATION_COLUMNS = (
    ("examples", "puzzles"),
    ("exact_accuracy", "exact (chosen)"),
    ("oracle_exact_accuracy", "oracle"),
    ("trajectories_per_puzzle", "trajectories / puzzle"),
    ("seconds_per_puzzle", "s / puzzle"),
)


def render_evaluation_index(
    name: str, evaluation: dict[str, Any], plots: list[dict[str, Any]]
) -> str:
    """The page for one ``trm eval --json`` document (named ``name``): what was explored
    and chosen, each figure set's accuracy, oracle and cost, and the rendered ``plots``."""
    kinds = evaluation.get("kinds")
    sets = kinds if isinstance(kinds, list) else [evaluation]
    parts = [
        *_head(f"trm report: {escape(name)}"),
        f"<p>{escape(str(evaluation.get('model') or evaluation.get('checkpoint', '')))}, step "
        f"{escape(str(evaluation.get('step')))}: {escape(str(evaluation.get('explore')))} "
        f"trajectories a puzzle, chosen by {escape(str(evaluation.get('select')))}.</p>",
        _table(
            ["puzzles of", *(title for _, title in EVALUATION_COLUMNS)],
            [
                [
                    escape(str(s.get("kind") or s.get("split") or "")),
                    *(_value(s.get(key)) for key, _ in EVALUATION_COLUMNS),
                ]
                for s in sets
                if isinstance(s, dict)
            ],
        ),
    ]
    return "\n".join(parts + _figures(plots)) + "\n"
