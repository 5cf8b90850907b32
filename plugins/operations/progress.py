"""Live progress: one refreshing line on a terminal or in a notebook, plain periodic lines
otherwise.

The line shows step/total, samples/s, loss, the latest eval exact accuracy and the ETA; on a
terminal it starts with a progress bar drawn by rich (in colour where the terminal has it),
and the whole line is cut to the terminal's width so it never wraps. In a Jupyter kernel
(``trm.train`` in a notebook) the same bar and line, drawn by rich as HTML, refresh in one
output of the cell (an IPython display handle). ``--plugins no:progress`` (``trm.train(...,
plugins=["no:progress"])``) switches all of it off. Log lines clear it
first (``trm.cli.output.info``), so the two never run together.
The end of the run prints a short summary. (metrics.jsonl and summary.json are written by
the core loop, so switching this plugin off never loses a record.)
"""

from __future__ import annotations

import io
import shutil
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress_bar import ProgressBar

from trm import hookimpl
from trm.control import TrainControl
from trm.state import TrainState

PLAIN_LINES_PER_RUN = 20
PLAIN_MIN_INTERVAL_S = 15.0
DATA_WAIT_SHOWN = 0.05  # the line shows the share of a step spent waiting for data above this
BAR_MAX_CHARS = 30
BAR_MIN_CHARS = 10  # a narrower terminal shows the line without a bar


def _format_duration(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _data_wait(state: TrainState, metrics: dict[str, Any]) -> str:
    """ "  data wait N%" when the step waited more than DATA_WAIT_SHOWN for its batch."""
    wait_s, rate = metrics.get("data_wait_s"), metrics.get("samples_per_s")
    if not wait_s or not rate:
        return ""
    share = wait_s / (state.spec.train.global_batch_size / rate)
    return f"  data wait {share:.0%}" if share > DATA_WAIT_SHOWN else ""


def notebook_kernel() -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell), whose cell outputs can be
    refreshed in place. Never imports IPython itself: a process that has not imported it is
    not a kernel."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


class NotebookLine:
    """One line of progress as a notebook shows it: HTML (rich's bar and the text, exported
    with inline styles) with the plain text for other front ends."""

    def __init__(self, text: str, fraction: float | None) -> None:
        self.text = text
        self.fraction = fraction

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        console = Console(
            file=io.StringIO(),
            record=True,
            width=200,
            color_system="truecolor",
            force_terminal=True,
            force_jupyter=False,
            highlight=False,
        )
        if self.fraction is not None:
            bar = ProgressBar(total=1.0, completed=min(max(self.fraction, 0.0), 1.0), width=40)
            console.print(bar, " ", self.text, end="", sep="")
        else:
            console.print(self.text, end="")
        return console.export_html(
            inline_styles=True, code_format='<pre style="margin:0">{code}</pre>'
        )


def render_bar(fraction: float, width: int, color_system: str | None) -> str:
    """A progress bar of ``width`` characters for ``fraction`` done: rich's, with its ANSI
    colours, or ``[###---]`` on a terminal without colour."""
    fraction = min(max(fraction, 0.0), 1.0)
    if color_system is None:
        done = round(fraction * (width - 2))
        return "[" + "#" * done + "-" * (width - 2 - done) + "]"
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system=color_system, width=width)
    console.print(ProgressBar(total=1.0, completed=fraction, width=width), end="")
    return buffer.getvalue()


class Progress:
    """Live progress: one refreshing line on a terminal, plain periodic lines otherwise.

    One instance per run (the plugin manager makes it): the display state of that run.
    """

    ACTIVATION = "default"

    def __init__(self) -> None:
        self.start_s = 0.0
        self.start_step = 0
        self.last_print_s = 0.0
        self.tty = False
        self.color_system: str | None = None
        self.eval_text = "-"
        self.notebook_handle: Any = None  # the refreshed output of a notebook cell
        self.last_metrics: dict[str, Any] | None = None  # the newest step's, for the last bar

    def line(self, state: TrainState, metrics: dict[str, Any]) -> str:
        elapsed_s = time.perf_counter() - self.start_s
        done = state.step - self.start_step
        remaining = state.total_steps - state.step
        eta_s = elapsed_s / done * remaining if done else float("nan")
        return (
            f"step {state.step}/{state.total_steps}  {metrics['samples_per_s']:.0f} samples/s"
            f"  loss {metrics['loss']:.4f}  eval exact {self.eval_text}"
            f"{_data_wait(state, metrics)}  ETA {_format_duration(eta_s)}"
        )

    def show(self, text: str, fraction: float | None = None) -> None:
        """Write ``text``: on a terminal, one line that never wraps (cut to the terminal's
        width), led by a bar for ``fraction`` when there is room; else a plain line."""
        if self.notebook_handle is not None:
            self.notebook_handle.update(NotebookLine(text, fraction))
            return
        if self.tty:
            width = shutil.get_terminal_size((80, 24)).columns
            text = text[: max(1, width - 1)]
            bar_chars = min(BAR_MAX_CHARS, width - 2 - len(text))
            if fraction is not None and bar_chars >= BAR_MIN_CHARS:
                text = render_bar(fraction, bar_chars, self.color_system) + " " + text
            sys.stdout.write("\r\033[K" + text)
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        self.start_s = time.perf_counter()
        self.start_step = state.step
        self.tty = sys.stdout.isatty()
        if self.tty:
            self.color_system = Console(file=sys.stdout).color_system
        if notebook_kernel():
            from IPython.display import display  # present: this is a kernel

            line = NotebookLine(f"step {state.step}/{state.total_steps}  starting", 0.0)
            self.notebook_handle = display(line, display_id=True)

    @hookimpl
    def on_step(self, state: TrainState, metrics: dict[str, Any], control: TrainControl) -> None:
        now = time.perf_counter()
        self.last_metrics = metrics
        every = max(1, state.total_steps // PLAIN_LINES_PER_RUN)
        if self.tty or self.notebook_handle is not None:
            due = now - self.last_print_s >= 0.2
        else:
            due = (
                state.step % every == 0
                or state.step == 1
                or now - self.last_print_s >= PLAIN_MIN_INTERVAL_S
            )
        if due:
            self.last_print_s = now
            self.show(self.line(state, metrics), state.step / max(state.total_steps, 1))

    @hookimpl
    def on_eval(self, state: TrainState, metrics: dict[str, Any], control: TrainControl) -> None:
        self.eval_text = f"{metrics['exact_accuracy']:.1%}"
        text = (
            f"eval @ step {state.step}: exact accuracy {metrics['exact_accuracy']:.2%}, "
            f"cell accuracy {metrics['cell_accuracy']:.2%} ({metrics['examples']} held-out)"
        )
        if state.best_metric != "exact_accuracy" and state.best_metric in metrics:
            text += f", {state.best_metric} {metrics[state.best_metric]:.2%}"
        tasks = [
            k.removeprefix("exact_accuracy/") for k in metrics if k.startswith("exact_accuracy/")
        ]
        if tasks:  # a multi-task mix: each task's exact accuracy
            text += "; " + ", ".join(f"{t} {metrics[f'exact_accuracy/{t}']:.2%}" for t in tasks)
        if self.tty:
            sys.stdout.write("\r\033[K")
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    @hookimpl
    def on_train_end(self, state: TrainState, summary: dict[str, Any]) -> None:
        if self.notebook_handle is not None and self.last_metrics is not None:
            self.show(self.line(state, self.last_metrics), state.step / max(state.total_steps, 1))
        if self.tty:
            sys.stdout.write("\n")
        best = summary.get("best_exact_accuracy")
        accuracy = "no evaluation ran" if best is None else f"best exact accuracy {best:.2%}"
        metric = summary.get("best_metric", "exact_accuracy")
        if best is not None and metric != "exact_accuracy":
            accuracy = f"best {metric} {summary['best_value']:.2%} (exact accuracy {best:.2%})"
        print(
            f"done: {summary['steps']} steps, {summary['samples']} samples in "
            f"{_format_duration(summary['wall_s'])}; {accuracy} ({summary['stopped']})"
        )
        sys.stdout.flush()
