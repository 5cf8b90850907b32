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
file carrying pickled code is refused, never run. Given a run directory, the newest valid
checkpoint loads; a truncated or corrupt newer one is skipped with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from trm import hookimpl
from trm.errors import TrmError
from trm.state import TrainState

ACTIVATION = "default"

NAME_PATTERN = re.compile(r"^step-(\d{8})\.pt$")
CHECKPOINT_DIR = "checkpoints"
BEST_FILE = "best.json"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINT_DIR


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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

    The payload gets ``loaded_from`` (the path, as text) for messages.
    """
    sha_file = path.with_name(path.name + ".sha256")
    if sha_file.exists():
        text = sha_file.read_text().strip()
        recorded = text.split()[0] if text else ""
        if recorded != file_sha256(path):
            raise TrmError(
                f"checkpoint {path} does not match its recorded SHA-256 (truncated or corrupt)"
            )
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise TrmError(
            f"checkpoint {path} was refused: it carries pickled code or objects "
            f"that are not plain weights ({str(exc).strip().splitlines()[0]})"
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrmError(f"checkpoint {path} cannot be read: {first}") from exc
    if not isinstance(payload, dict) or "model" not in payload or "spec" not in payload:
        raise TrmError(f"checkpoint {path} is not a trm checkpoint")
    payload["loaded_from"] = str(path)
    return payload


@hookimpl
def load_checkpoint(path: Path, map_location: str) -> dict[str, Any] | None:
    """A file loads as it is; a run directory loads its newest valid checkpoint."""
    if path.is_file():
        return read_checkpoint(path, map_location)
    if path.name == CHECKPOINT_DIR and not checkpoint_dir(path).is_dir():
        path = path.parent  # given the checkpoints folder itself
    candidates = list_checkpoints(path)
    for candidate in reversed(candidates):
        try:
            return read_checkpoint(candidate, map_location)
        except TrmError as exc:
            print(f"trm: warning: {exc}; trying the previous checkpoint", file=sys.stderr)
    if candidates:
        raise TrmError(
            f"no valid checkpoint in {checkpoint_dir(path)}; start afresh with --resume never"
        )
    return None
