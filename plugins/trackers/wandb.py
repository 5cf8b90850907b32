"""wandb: every metrics row, evaluation and event to Weights & Biases (opt-in).

``pip install 'trm[wandb]'``, then ``trm run SPEC --plugins wandb``. It mirrors metrics.jsonl
(``train/<key>``, ``eval/<key>``, ``events/<name>``, logged at the row's step) and sends the
resolved spec and the hardware profile as the run's config; the W&B run is named after the
run directory and its files go to ``RUN_DIR/wandb``.

- **Modes.** W&B's own environment decides: ``WANDB_MODE=offline`` logs to disk with no
  network (``wandb sync RUN_DIR/wandb/offline-run-*`` uploads later), ``disabled`` logs
  nothing; ``WANDB_PROJECT`` (default ``trm``) and ``WANDB_ENTITY`` choose where.
- **Never in the way.** Everything W&B does — starting the run, logging, finishing — happens in
  a background thread that reads metrics.jsonl; the loop only wakes it after each step. If
  the service cannot be reached, the run goes on: W&B falls back to offline mode (a warning
  says where the files are), and at the end the plugin waits at most
  ``TRM_WANDB_FINISH_S`` seconds (default 60) for W&B to finish.
- **Resume.** The W&B run id is kept in ``RUN_DIR/wandb-run-id``; a resumed run continues the
  same W&B run (``resume="allow"``). A run started afresh (step 0) gets a new id.

Only rank 0 of a torchrun job logs.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import string
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trm import hookimpl
from trm.control import TrainControl
from trm.plugins.trackers.metrics_tail import MetricsTail, is_main_process, read_hardware, scalars
from trm.spec import spec_to_dict
from trm.state import TrainState

ID_FILE = "wandb-run-id"
DEFAULT_PROJECT = "trm"
# The values W&B takes for WANDB_MODE (wandb 0.2x: "dryrun" and "run" are older names).
MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")
FINISH_ENV = "TRM_WANDB_FINISH_S"
DEFAULT_FINISH_S = 60.0
_ID_ALPHABET = string.ascii_lowercase + string.digits
_NOT_IN_ID = set("/\\#?%: ")  # characters W&B refuses in a run id


def _first_line(exc: BaseException) -> str:
    """An exception as one line for the user (W&B's own messages run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_id(run_dir: Path, fresh: bool, say: Callable[[str], None] = print) -> str:
    """The W&B run id of this run directory: the stored one, unless ``fresh`` (or none is
    stored), in which case a new one is stored. A stored id that is no id (not UTF-8 text,
    or holding characters W&B refuses) gets a new one too, and ``say`` tells the user."""
    path = run_dir / ID_FILE
    if not fresh:
        try:
            stored = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            stored = ""
        except (OSError, UnicodeDecodeError):
            stored = "\0"  # unreadable: not an id
        if stored and (not stored.isprintable() or set(stored) & _NOT_IN_ID):
            say(f"wandb: {path} holds no W&B run id; this run is logged as a new W&B run")
            stored = ""
        if stored:
            return stored
    new = "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
    path.write_text(new + "\n", encoding="utf-8")
    return new


class WandB:
    """wandb: every metrics row, evaluation and event to Weights & Biases.

    One instance per run: the background worker and what wakes it.
    """

    ACTIVATION = "opt-in"
    UNAVAILABLE_REASON = "the wandb package is not installed; pip install 'trm[wandb]'"

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()
        self.summary: dict[str, Any] | None = None  # set when the run has ended
        self.run_dir: Path | None = None
        self.messages: deque[str] = deque()  # from the worker, for the user (thread-safe)

    def is_available(self) -> bool:
        return importlib.util.find_spec("wandb") is not None

    @hookimpl
    def on_train_start(self, state: TrainState, control: TrainControl) -> None:
        if not is_main_process():
            return
        mode = os.environ.get("WANDB_MODE", "")
        if mode and mode not in MODES:
            control.log(
                f"warning: wandb: WANDB_MODE={mode} is not a W&B mode (use one of "
                f"{', '.join(MODES)}); this run is not logged to W&B"
            )
            return
        self.run_dir = state.run_dir
        tail = MetricsTail(state.run_dir / "metrics.jsonl")
        tail.start()
        settings = {
            "project": os.environ.get("WANDB_PROJECT", DEFAULT_PROJECT),
            "name": state.run_dir.resolve().name,
            "dir": str(state.run_dir),
            "id": run_id(state.run_dir, fresh=state.step == 0, say=control.log),
            "resume": "allow",
            "config": {"spec": spec_to_dict(state.spec), "hardware": read_hardware(state)},
        }
        self.thread = threading.Thread(
            target=self.work, args=(settings, tail), name="trm-wandb", daemon=True
        )
        self.thread.start()

    # ------------------------------------------------------------------ the worker

    def say(self, message: str) -> None:
        """A line for the user: shown by the loop after its next step, or at the end."""
        self.messages.append(f"wandb: {message}")

    def start_run(self, settings: dict[str, Any]) -> Any:
        """``wandb.init``; when the service cannot be reached, the same run offline."""
        import wandb

        quiet = wandb.Settings(console="off", silent=True)
        try:
            return wandb.init(**settings, settings=quiet)
        except Exception as exc:  # unreachable service, bad key: keep the data on disk
            if os.environ.get("WANDB_MODE") in ("offline", "disabled"):
                raise
            reason = _first_line(exc)
            self.say(
                f"cannot log online ({reason}); logging offline into {settings['dir']}/wandb "
                "— upload later with `wandb sync`"
            )
            wandb.teardown()  # the failed attempt still holds the run id
            return wandb.init(**settings, mode="offline", settings=quiet)

    def work(self, settings: dict[str, Any], tail: MetricsTail) -> None:
        """The worker: start the W&B run, then log the new rows each time it is woken;
        once the run has ended, log the last rows and the summary and finish."""
        import wandb

        try:
            run = self.start_run(settings)
        except Exception as exc:
            self.say(f"W&B could not start ({_first_line(exc)}); this run is not logged to W&B")
            return
        try:
            while True:
                self.wake.wait()
                self.wake.clear()
                ended = self.summary is not None
                for row in tail.read():
                    run.log(scalars(row), step=row["step"])
                if ended:
                    numbers = {k: v for k, v in self.summary.items() if isinstance(v, (int, float))}
                    run.summary.update(numbers)
                    break
        except Exception as exc:  # a logging failure never reaches the training loop
            self.say(f"logging failed ({_first_line(exc)}); the rest of this run is not logged")
        finally:
            try:
                run.finish()
                wandb.teardown()  # the next run in this process reads its settings afresh
            except Exception as exc:
                self.say(f"W&B could not finish ({_first_line(exc)})")

    # ------------------------------------------------------------------ the loop's side

    def take_messages(self) -> list[str]:
        taken = []
        while self.messages:
            taken.append(self.messages.popleft())
        return taken

    @hookimpl
    def on_step(self, control: TrainControl) -> None:
        if self.thread is not None:
            self.wake.set()
        for message in self.take_messages():
            control.log(message)

    @hookimpl
    def on_train_end(self, summary: dict[str, Any]) -> None:
        if self.thread is None:
            return
        self.summary = summary
        self.wake.set()
        limit_s = float(os.environ.get(FINISH_ENV, DEFAULT_FINISH_S))
        self.thread.join(limit_s)
        for message in self.take_messages():
            print(f"trm: {message}", file=sys.stderr)
        if self.thread.is_alive():
            print(
                f"trm: wandb: W&B has not finished after {limit_s:.0f} s; what it has not "
                f"sent stays in {self.run_dir}/wandb (upload it with `wandb sync`)",
                file=sys.stderr,
            )
        self.thread = None
