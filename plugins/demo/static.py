"""``trm demo --static DIR``: the page as a folder for static hosting, no Python behind it.

The folder holds the page (index.html, its JavaScript and CSS), ``trm-demo.json`` (the page's
own settings: solver ``onnx``, the model's name and what it solves), the model's solver as
the ``onnx`` format writes it (``model.onnx`` and its card ``trm-onnx.json``, whose vocab the
page encodes puzzles with) and onnxruntime-web's wasm build under ``ort/`` (the copy shipped
in this package, checked against its lock). Nothing on the page is fetched from elsewhere.

It is assembled in a hidden folder beside DIR and renamed into place, so a refused or failed
write leaves nothing behind.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs

from trm.api.model import Model
from trm.errors import TrmError
from trm.formats import ExportOptions, model_formats
from trm.plugin_manager import TrmPluginManager
from trm.plugins.demo.server import page_dir
from trm.plugins.demo.session import page_card
from trm.plugins.demo.vendor import read_lock, runtime_bytes, vendored_files

ONNX_FORMAT = "onnx"
ONNX_FILE = "model.onnx"
CARD_FILE = "trm-onnx.json"
SETTINGS_FILE = "trm-demo.json"
RUNTIME_DIR = "ort"
# The served page's file that a static page has no use for.
SERVER_ONLY = ("solver-server.js",)


@attrs.frozen
class StaticPage:
    """What ``write_static`` wrote: the folder, its files' bytes and the runtime's version."""

    folder: Path
    files_bytes: dict[str, int]
    onnxruntime_web: str

    @property
    def total_bytes(self) -> int:
        return sum(self.files_bytes.values())


def check_static_folder(out: Path) -> None:
    """TrmError, before any work, when ``out`` exists (the page goes into a new folder) or
    its parent is not a folder."""
    if out.exists():
        raise TrmError(f"--static {out} exists; give a new folder for the page")
    if out.parent.exists() and not out.parent.is_dir():
        raise TrmError(f"--static {out}: {out.parent} is a file, not a folder")


def write_static(model: Model, name: str, out: Path, pm: TrmPluginManager) -> StaticPage:
    """Write the static page of ``model`` into the new folder ``out``; ``name`` is what it
    was loaded from (a shipped model's name or a path), which the ``onnx`` format exports."""
    check_static_folder(out)
    card_expected = page_card(model, name)
    exporter = _onnx_format(pm)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for file in sorted(page_dir().iterdir()):
            if file.is_file() and file.name not in SERVER_ONLY:
                shutil.copyfile(file, staging / file.name)
        (staging / RUNTIME_DIR).mkdir()
        for entry in vendored_files():
            (staging / RUNTIME_DIR / entry.name).write_bytes(runtime_bytes(entry))
        exported = staging / ".onnx-export"
        exporter.export(pm, Path(name), exported, _default_options(exporter))
        for produced in (ONNX_FILE, CARD_FILE):
            if not (exported / produced).is_file():
                raise TrmError(f"the {ONNX_FORMAT} format wrote no {produced}; is it up to date?")
            shutil.move(exported / produced, staging / produced)
        shutil.rmtree(exported)
        card = json.loads((staging / CARD_FILE).read_text(encoding="utf-8"))
        check_card(card, card_expected)
        settings = {
            "format": "trm-demo",
            "version": 1,
            "solver": ONNX_FORMAT,
            "card": CARD_FILE,
            "model_file": ONNX_FILE,
            "model": {"name": name},
            "puzzle": card_expected["puzzle"],
        }
        (staging / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", "utf-8")
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = {
        str(path.relative_to(out)): path.stat().st_size
        for path in sorted(out.rglob("*"))
        if path.is_file()
    }
    return StaticPage(folder=out, files_bytes=files, onnxruntime_web=read_lock()["version"])


def check_card(card: Any, expected: dict[str, Any]) -> None:
    """TrmError unless the solver card gives what the page reads as the model's page card
    ``expected`` has it (both from the source's ``cell_encoding``): the task, seq_len,
    steps, grid and every entry of the vocab."""
    if not isinstance(card, dict) or card.get("format") != "trm-onnx":
        raise TrmError(f"{CARD_FILE} is not a trm-onnx solver card")
    for key in ("task", "seq_len", "steps", "grid"):
        if card.get(key) != expected[key]:
            raise TrmError(
                f"{CARD_FILE}: {key} is {card.get(key)!r}, the model's is {expected[key]!r}"
            )
    vocab = card.get("vocab")
    for key, value in expected["vocab"].items():
        if not isinstance(vocab, dict) or vocab.get(key) != value:
            raise TrmError(
                f"{CARD_FILE}: vocab.{key} is "
                f"{vocab.get(key) if isinstance(vocab, dict) else None!r}; the page reads "
                f"{value!r}"
            )


def _onnx_format(pm: TrmPluginManager) -> Any:
    """The ``onnx`` model format; TrmError when no enabled plugin offers it."""
    for fmt in model_formats(pm):
        if fmt.name == ONNX_FORMAT:
            return fmt
    raise TrmError(
        f"--static needs the {ONNX_FORMAT} model format (trm export --format {ONNX_FORMAT}), "
        "which no enabled plugin offers; switch the formats plugin on"
    )


def _default_options(fmt: Any) -> argparse.Namespace:
    """The format's ``trm export`` options at their defaults (``--static`` sets none)."""
    parser = argparse.ArgumentParser(add_help=False)
    fmt.add_export_options(ExportOptions(parser.add_argument))
    return parser.parse_args([])
