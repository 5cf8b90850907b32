"""Reading a checkpoint file safely: its SHA-256, and ``torch.load`` that runs no code.

:func:`load_weights_only` is the one place trm calls ``torch.load``: trm's own checkpoints
(the ``load_checkpoint`` hook), the reference's ``step_N`` files (``trm import``,
``--init-from``) and shipped models all come through it. It uses ``weights_only=True``, so a
file carrying pickled code is refused, never run; a file that is plainly something else
(empty, text, JSON, a zip archive of another kind, other binary data) is named for what it is
before torch sees it; a truncated or corrupt one "cannot be read". Each refusal is one
TrmError that names the file and says what to give instead.

torch is imported when a file is loaded, so :func:`file_sha256` costs no torch import.
"""

from __future__ import annotations

import hashlib
import pickle
import zipfile
from pathlib import Path
from typing import Any

from trm.errors import TrmError

# How a file starts: a PyTorch zip archive, or the legacy format's pickle protocol opcode.
ZIP_MAGIC = b"PK\x03\x04"
PICKLE_MAGIC = b"\x80"
# Bytes read from the start of a file to tell what it is.
_SNIFF_BYTES = 4096
# Bytes read at a time while hashing.
_HASH_BLOCK_BYTES = 1 << 20


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, as hex; OSError when it cannot be read."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_HASH_BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _not_a_torch_file(path: Path) -> str | None:
    """Why ``path`` is plainly not a PyTorch file (unreadable, empty, text, JSON, another
    zip, other binary data), as words that follow its name; None when it may be one."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or first_line(exc)}"
    if not head:
        return "is empty (0 bytes), so it holds no checkpoint"
    if head.startswith(ZIP_MAGIC):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            return None  # a damaged PyTorch archive: torch.load says what is wrong
        if not any(name.endswith("/data.pkl") for name in names):
            return "is a zip archive but not a PyTorch checkpoint (no data.pkl inside)"
        return None
    if head.startswith(PICKLE_MAGIC):
        return None
    if head.lstrip()[:1] in (b"{", b"["):
        kind = "a JSON or text file"
    else:
        try:
            head.decode("utf-8")
            kind = "a text file"
        except UnicodeDecodeError as exc:
            # a cut multi-byte character at the end of the sample is still text
            kind = "a text file" if exc.start >= len(head) - 3 else "binary data of another kind"
    return f"is not a PyTorch checkpoint: it is {kind}, not a PyTorch file"


def _is_zip_archive(path: Path) -> bool:
    """Whether ``path`` is in torch's zip format, the one ``torch.load(mmap=True)`` maps."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    except OSError:
        return False


def _refusal(named: str, exc: pickle.UnpicklingError) -> str:
    """The message for torch's weights-only refusal: pickled code, or a damaged stream."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    code = next((line for line in lines if "GLOBAL" in line or "global" in line), None)
    if code is None and any("operand" in line for line in lines):
        operand = next(line for line in lines if "operand" in line)
        return (
            f"{named} cannot be read: it is not a valid PyTorch file "
            f"({operand.rstrip('.')}); truncated or corrupt"
        )
    detail = code or (lines[-1] if lines else type(exc).__name__)
    return (
        f"{named} was refused: it carries pickled code or objects that are not plain weights "
        f"({detail.rstrip('.')}); trm loads weights only"
    )


def load_weights_only(
    path: Path,
    what: str,
    give: str,
    map_location: str = "cpu",
    memory_map: bool = False,
) -> Any:
    """``torch.load(path, weights_only=True)``: whatever plain tensors and containers the file
    holds, never code.

    ``what`` names the file in messages ("checkpoint", "--init-from checkpoint") and ``give``
    says what to give instead ("give the step_N file the run saved"). TrmError, one line
    naming ``what`` and ``path``, for a folder, an unreadable, empty or plainly non-PyTorch
    file, a file carrying pickled code, and a truncated or corrupt one. With ``memory_map``
    a file in torch's zip format loads memory-mapped (``mmap=True``): its tensors are read
    from the page cache as they are used, so processes reading one file share one copy.
    """
    import torch  # here, so that hashing a file never imports torch

    named = f"{what} {path}"
    if path.is_dir():
        raise TrmError(f"{named} is a folder, not a checkpoint file; {give}")
    reason = _not_a_torch_file(path)
    if reason is not None:
        raise TrmError(f"{named} {reason}; {give}")
    try:
        return torch.load(
            path,
            map_location=map_location,
            weights_only=True,
            mmap=memory_map and _is_zip_archive(path),
        )
    except pickle.UnpicklingError as exc:
        raise TrmError(_refusal(named, exc)) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise TrmError(f"{named} cannot be read: {first_line(exc)}; truncated or corrupt") from exc
    except Exception as exc:  # a damaged stream can fail in any way; it never runs code
        raise TrmError(
            f"{named} cannot be read: not a valid PyTorch file "
            f"({type(exc).__name__}: {first_line(exc)}); truncated or corrupt"
        ) from exc
