"""Local checkpoints: atomic writes, SHA-256 records, rotation keeping the best, safe resume.

Layout under the run directory::

    checkpoints/step-00000120.pt         the payload (TrainState.state_dict())
    checkpoints/step-00000120.pt.sha256  its SHA-256, written after the payload is in place
    checkpoints/best.json                which checkpoint holds the best evaluation

A write goes to a temporary file that is fsynced and renamed over the final name (and the
folder fsynced), so a kill at any moment leaves either the old set or the new set of files;
a failed write (disk full, read-only) removes its temporary file, keeps every earlier
checkpoint and raises OSError. Rotation keeps the newest ``train.checkpoint_keep`` files plus
the best. Loading checks the recorded SHA-256 and uses ``torch.load(weights_only=True)``: a
file carrying pickled code is refused, never run. A file in torch's zip format loads
memory-mapped (``mmap=True``): its tensors are read from the page cache as they are used, so
the ranks of a node share one copy of the file and each copies only what it keeps (its rows
of the carry) rather than every rank holding the whole file at once. Given a run directory,
the newest valid checkpoint loads; a truncated or corrupt newer one is skipped with a
warning.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from trm import hookimpl
from trm.checkpoint_file import file_sha256, first_line, load_weights_only
from trm.errors import TrmError
from trm.state import TrainState

ACTIVATION = "default"

NAME_PATTERN = re.compile(r"^step-(\d{8})\.pt$")
CHECKPOINT_DIR = "checkpoints"
BEST_FILE = "best.json"
# What to give instead of a file that is refused.
_GIVE = "give a step-*.pt file of a run's checkpoints/ folder, or the run directory"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINT_DIR


def _fsync_dir(folder: Path) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def write_atomic(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write through ``write(handle)`` to a temp file, fsync it, rename it to ``path``.

    Any failure removes the temp file and leaves ``path`` as it was; errors that are not
    already OSError (torch's writer reports a full disk as RuntimeError) become OSError.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        Path(tmp_name).unlink(missing_ok=True)
        if isinstance(exc, Exception) and not isinstance(exc, OSError):
            raise OSError(f"writing {path.name} failed: {exc}") from exc
        raise
    _fsync_dir(path.parent)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files of a run, oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if NAME_PATTERN.match(p.name))


def best_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint recorded as holding the best evaluation, if it still exists."""
    record = checkpoint_dir(run_dir) / BEST_FILE
    try:
        name = json.loads(record.read_text())["file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = checkpoint_dir(run_dir) / str(name)
    return path if NAME_PATTERN.match(path.name) and path.exists() else None


def _remove_stale_temporaries(folder: Path) -> None:
    """Temp files left by a process killed mid-write (this run dir has one writer)."""
    for leftover in folder.glob(".step-*.tmp"):
        leftover.unlink(missing_ok=True)


@hookimpl
def save_checkpoint(state: TrainState, run_dir: Path, reason: str) -> Path:
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(folder)
    path = folder / f"step-{state.step:08d}.pt"
    payload = state.state_dict()
    payload["reason"] = reason
    write_atomic(path, lambda handle: torch.save(payload, handle))
    digest = file_sha256(path)
    write_atomic(
        path.with_name(path.name + ".sha256"),
        lambda handle: handle.write(f"{digest}  {path.name}\n".encode()),
    )
    if state.best_step == state.step and state.last_eval:
        record = {
            "file": path.name,
            "step": state.step,
            "exact_accuracy": state.best_exact_accuracy,
            "cell_accuracy": state.last_eval.get("cell_accuracy"),
            "metric": state.best_metric,
            "value": state.best_value,
        }
        write_atomic(
            folder / BEST_FILE, lambda handle: handle.write(json.dumps(record).encode() + b"\n")
        )
    best = best_checkpoint(run_dir)
    for old in list_checkpoints(run_dir)[: -state.spec.train.checkpoint_keep]:
        if old != best:
            old.unlink(missing_ok=True)
            old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


def read_checkpoint(path: Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load one checkpoint file safely; TrmError says why a file is refused.

    A file whose ``.sha256`` record differs is refused; the rest are the refusals of
    :func:`trm.checkpoint_file.load_weights_only` (memory-mapped), and a PyTorch file that
    is not a trm checkpoint. The payload gets ``loaded_from`` (the path, as text) for
    messages.
    """
    sha_file = path.with_name(path.name + ".sha256")
    if sha_file.exists() and not path.is_dir():
        try:
            text = sha_file.read_text(encoding="utf-8", errors="replace").strip()
            recorded = text.split()[0] if text else ""
            actual = file_sha256(path)
        except OSError as exc:
            raise TrmError(
                f"checkpoint {path} cannot be read: {exc.strerror or first_line(exc)}"
            ) from exc
        if recorded != actual:
            raise TrmError(
                f"checkpoint {path} does not match its recorded SHA-256 (truncated or corrupt)"
            )
    payload = load_weights_only(path, "checkpoint", _GIVE, map_location, memory_map=True)
    if not isinstance(payload, dict) or "model" not in payload or "spec" not in payload:
        what = (
            f"a dict without {' or '.join(k for k in ('model', 'spec') if k not in payload)}"
            if isinstance(payload, dict)
            else type(payload).__name__
        )
        raise TrmError(
            f"checkpoint {path} is a PyTorch file but not a trm checkpoint (it holds {what}); "
            f"{_GIVE}"
        )
    payload["loaded_from"] = str(path)
    return payload


@hookimpl
def load_checkpoint(path: Path, map_location: str) -> dict[str, Any] | None:
    """A file loads as it is; a run directory loads its newest valid checkpoint.

    None when a folder holds no checkpoint files; TrmError when every one is refused.
    """
    if path.is_file():
        return read_checkpoint(path, map_location)
    if path.name == CHECKPOINT_DIR and not checkpoint_dir(path).is_dir():
        path = path.parent  # given the checkpoints folder itself
    candidates = list_checkpoints(path)
    for number, candidate in enumerate(reversed(candidates)):
        try:
            return read_checkpoint(candidate, map_location)
        except TrmError as exc:
            more = "trying the previous checkpoint" if number + 1 < len(candidates) else "none left"
            print(f"trm: warning: {exc}; {more}", file=sys.stderr)
    if candidates:
        raise TrmError(
            f"no valid checkpoint in {checkpoint_dir(path)}: all {len(candidates)} are "
            "corrupt or refused (warnings above); give an intact checkpoint file, or for "
            "`trm run` start afresh with --resume never"
        )
    return None
