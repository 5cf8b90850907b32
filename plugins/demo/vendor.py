"""onnxruntime-web's files as shipped in this package (vendor/, written by
scripts/vendor_onnxruntime_web.py): xz-compressed, each checked against the sha256 of the
lock file (vendor/onnxruntime-web.lock.json) before a page gets it."""

from __future__ import annotations

import hashlib
import json
import lzma
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from trm.errors import TrmError

LOCK_FILE = "onnxruntime-web.lock.json"


@attrs.frozen
class VendoredFile:
    """One file of the runtime: its ``name`` in the page's folder, its bytes' ``sha256``."""

    name: str
    sha256: str
    size_bytes: int
    stored_as: str


def vendor_dir() -> Path:
    return Path(str(resources.files("trm.plugins.demo") / "vendor"))


def read_lock() -> dict[str, Any]:
    """The lock document; TrmError when it is missing or damaged (a broken install)."""
    path = vendor_dir() / LOCK_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrmError(
            f"onnxruntime-web's lock file {path} cannot be read ({exc}); reinstall trm"
        ) from None


def vendored_files() -> list[VendoredFile]:
    return [
        VendoredFile(f["name"], f["sha256"], int(f["size_bytes"]), f["stored_as"])
        for f in read_lock()["files"]
    ]


def runtime_bytes(entry: VendoredFile) -> bytes:
    """The file's bytes, decompressed and checked; TrmError when they are not the locked ones."""
    path = vendor_dir() / entry.stored_as
    try:
        data = lzma.decompress(path.read_bytes())
    except (OSError, lzma.LZMAError) as exc:
        raise TrmError(f"onnxruntime-web's {path} cannot be read ({exc}); reinstall trm") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise TrmError(
            f"onnxruntime-web's {entry.name} has sha256 {digest}, not the locked "
            f"{entry.sha256}; reinstall trm"
        )
    return data
