"""tensorboard: every metrics row, evaluation and event as TensorBoard scalars (opt-in).

``pip install 'trm[tensorboard]'``, then ``trm run SPEC --plugins tensorboard`` and
``tensorboard --logdir RUN_DIR/tensorboard``. It mirrors metrics.jsonl: training rows as
``train/<key>``, evaluations as ``eval/<key>``, events as ``events/<name>`` (1 at the event's
step) and their numeric fields as ``events/<name>/<field>``; the resolved spec and the
hardware profile as hyperparameters and as text. The event files go to
``RUN_DIR/tensorboard``, so the run is named after its run directory. A resumed run writes
into the same folder and hides what the stopped process logged after the checkpoint it
resumes from (``purge_step``), as metrics.jsonl does. Only rank 0 of a torchrun job logs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trm import hookimpl
from trm.control import TrainControl
from trm.plugins.trackers.metrics_tail import MetricsTail, is_main_process, read_hardware, scalars
from trm.spec import spec_to_dict, spec_to_toml
from trm.state import TrainState

LOG_FOLDER = "tensorboard"
FLUSH_S = 10


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif isinstance(value, (bool, int, float, str)):
        out[prefix] = value
    elif value is not None:
        out[prefix] = str(value)


def check_writable(folder: Path) -> None:
    """Create ``folder`` and write and remove a file in it; OSError when it cannot be written
    (a read-only mount, no room). The event writer writes from a thread of its own, whose
    failure would print a traceback before the plugin hears of it."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".write-test-{os.getpid()}"
    with probe.open("wb") as handle:
        handle.write(b"ok")
    probe.unlink()


class TensorBoard:
    """tensorboard: every metrics row, evaluation and event as TensorBoard scalars.

    One instance per run: the open writer and how far metrics.jsonl has been read.
    """

    ACTIVATION = "opt-in"
    UNAVAILABLE_REASON = "the tensorboard package is not installed; pip install 'trm[tensorboard]'"

    def __init__(self) -> None:
        self.writer: Any = None
        self.tail: MetricsTail | None = None

    def is_available(self) -> bool:
        return importlib.util.find_spec("tensorboard") is not None

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        if not is_main_process():
            return
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        log_dir = state.run_dir / LOG_FOLDER
        try:
            check_writable(log_dir)  # before the writer's thread meets it with a traceback
            self.writer = SummaryWriter(str(log_dir), purge_step=state.step + 1, flush_secs=FLUSH_S)
            self.tail = MetricsTail(state.run_dir / "metrics.jsonl")
            self.tail.start()
            config = self.config(state)
            for summary in hparams(config, {}):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("spec", "```\n" + spec_to_toml(state.spec) + "```", state.step)
            hardware = json.dumps(read_hardware(state), indent=2)
            self.writer.add_text("hardware", "```\n" + hardware + "\n```", state.step)
        except OSError as exc:
            self.give_up(control.log, f"cannot write {log_dir} ({exc.strerror or exc})")
            return
        control.log(f"tensorboard: logging to {log_dir} (tensorboard --logdir {log_dir})")

    def give_up(self, say: Callable[[str], None], reason: str) -> None:
        """Stop logging for the rest of the run, with one warning line: the training goes
        on (as W&B's plugin does when it cannot log)."""
        say(f"warning: tensorboard: {reason}; this run is not logged to TensorBoard")
        writer, self.writer, self.tail = self.writer, None, None
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()

    @staticmethod
    def config(state: TrainState) -> dict[str, Any]:
        """The spec and the hardware profile as flat hyperparameters (``arch.hidden_size``,
        ``hardware.cpu_model``; lists become text)."""
        out: dict[str, Any] = {}
        _flat("", spec_to_dict(state.spec), out)
        _flat("hardware", read_hardware(state), out)
        return out

    def write_new_rows(self, say: Callable[[str], None]) -> None:
        if self.writer is None or self.tail is None:
            return
        try:
            for row in self.tail.read():
                for name, value in scalars(row).items():
                    self.writer.add_scalar(name, value, row["step"])
        except OSError as exc:
            self.give_up(say, f"writing failed ({exc.strerror or exc})")

    @hookimpl
    def on_step(self, control: TrainControl) -> None:
        self.write_new_rows(control.log)

    @hookimpl
    def on_train_end(self) -> None:
        self.write_new_rows(_stderr)
        if self.writer is not None:
            try:
                self.writer.close()
            except OSError as exc:
                _stderr(f"warning: tensorboard: closing failed ({exc.strerror or exc})")
            self.writer = None


def _stderr(message: str) -> None:
    """A line for the user after the loop has ended (control.log is no longer read)."""
    print(f"trm: {message}", file=sys.stderr)
