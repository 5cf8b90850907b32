"""Local checkpoints: atomic writes, SHA-256 records, rotation, newest-valid resume.

Layout under the run directory::

    checkpoints/step-00000120.pt       the payload (TrainState.state_dict())
    checkpoints/step-00000120.pt.sha256 its SHA-256, written after the payload is in place

A write goes to a temporary file that is fsynced and renamed over the final name, so a kill
at any moment leaves either the old set or the new set of files. Loading checks the recorded
SHA-256 and uses ``torch.load(weights_only=True)``: a file carrying pickled code is refused.
If the newest checkpoint is truncated or corrupt, the previous one is used, with a warning.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from trm import hookimpl
from trm.errors import TrmError
from trm.state import TrainState

ACTIVATION = "default"

NAME_PATTERN = re.compile(r"^step-(\d{8})\.pt$")
CHECKPOINT_DIR = "checkpoints"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / CHECKPOINT_DIR


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_atomic(path: Path, write: Any) -> None:
    """Write through ``write(handle)`` to a temp file, fsync it, rename it to ``path``."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files of a run, oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if NAME_PATTERN.match(p.name))


@hookimpl
def save_checkpoint(state: TrainState, run_dir: Path, reason: str) -> Path:
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{state.step:08d}.pt"
    payload = state.state_dict()
    payload["reason"] = reason
    _write_atomic(path, lambda handle: torch.save(payload, handle))
    digest = file_sha256(path)
    _write_atomic(
        path.with_name(path.name + ".sha256"),
        lambda handle: handle.write(f"{digest}  {path.name}\n".encode()),
    )
    for old in list_checkpoints(run_dir)[: -state.spec.train.checkpoint_keep]:
        old.unlink(missing_ok=True)
        old.with_name(old.name + ".sha256").unlink(missing_ok=True)
    return path


def read_checkpoint(path: Path, map_location: str = "cpu") -> dict[str, Any]:
    """Load one checkpoint file safely; TrmError says why a file is refused."""
    sha_file = path.with_name(path.name + ".sha256")
    if sha_file.exists():
        recorded = sha_file.read_text().split()[0] if sha_file.read_text().strip() else ""
        if recorded != file_sha256(path):
            raise TrmError(
                f"checkpoint {path} does not match its recorded SHA-256 (truncated or corrupt)"
            )
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise TrmError(
            f"checkpoint {path} was refused: it carries pickled code or objects "
            f"that are not plain weights ({str(exc).splitlines()[0]})"
        ) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as exc:
        raise TrmError(f"checkpoint {path} cannot be read: {str(exc).splitlines()[0]}") from exc
    if not isinstance(payload, dict) or "model" not in payload or "spec" not in payload:
        raise TrmError(f"checkpoint {path} is not a trm checkpoint")
    return payload


@hookimpl
def load_checkpoint(path: Path, map_location: str) -> dict[str, Any] | None:
    """A file loads as it is; a run directory loads its newest valid checkpoint."""
    if path.is_file():
        return read_checkpoint(path, map_location)
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
