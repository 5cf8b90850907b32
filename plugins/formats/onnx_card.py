"""The ONNX solver folder's card, ``trm-onnx.json``: what a reader with no Python needs.

``trm export MODEL --format onnx --out DIR`` writes ``DIR/model.onnx`` and this card
(UTF-8 JSON) beside it::

    format          "trm-onnx"             what says the folder is a trm ONNX solver
    version         1                      the card's layout; a reader refuses a newer one
    task            the data source's name ("sudoku", "maze")
    seq_len, steps  tokens a puzzle; supervision steps unrolled in the graph
    grid, vocab     the puzzle's layout and tokens (the source's ``cell_encoding``)
    opset           the ONNX opset of the graph
    halt_rule       "q_halt > 0" or "q_halt > q_continue": when the Q head asks to halt
    file, inputs, outputs   the graph file and its tensors (names, dtypes, shapes)
    exported_with   torch, trm and the exporter
    tested_runtime  the onnxruntime that checked the file against torch at export
    model           name, source (what was exported), step, and for a shipped model the
                    puzzles it solves

Reading is json only: :func:`read_card` checks every field a solver uses and names the
first that is missing or wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trm.errors import TrmError

CARD_FILE = "trm-onnx.json"
MODEL_FILE = "model.onnx"
FORMAT_NAME = "trm-onnx"
FORMAT_VERSION = 1
HALT_RULES = ("q_halt > 0", "q_halt > q_continue")
# The graph's tensors, as the card lists them (the contract docs/interop.md states).
INPUTS = {
    "inputs": {"dtype": "int64", "shape": ["batch", "seq_len"]},
    "puzzle_identifiers": {"dtype": "int64", "shape": ["batch"]},
}
OUTPUTS = {
    "answers": {"dtype": "int64", "shape": ["steps", "batch", "seq_len"]},
    "q_halt": {"dtype": "float32", "shape": ["steps", "batch"]},
    "q_continue": {"dtype": "float32", "shape": ["steps", "batch"]},
}
# field -> the JSON type a reader needs (int fields are whole numbers >= 1)
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "task": str,
    "seq_len": int,
    "steps": int,
    "grid": dict,
    "vocab": dict,
    "opset": int,
    "halt_rule": str,
    "model": dict,
}


def is_solver_folder(path: Path) -> bool:
    """True when ``path`` is a folder holding a card (a damaged one too: reading names it)."""
    return path.is_dir() and (path / CARD_FILE).is_file()


def read_card(folder: Path) -> dict[str, Any]:
    """The checked card of the solver folder ``folder``; TrmError naming the file and the
    first field that is missing or of the wrong kind, or a newer card version."""
    path = folder / CARD_FILE
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrmError(f"{path} cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise TrmError(f"{path} is not valid JSON ({exc}); it is damaged") from None
    if not isinstance(card, dict) or card.get("format") != FORMAT_NAME:
        found = card.get("format") if isinstance(card, dict) else type(card).__name__
        raise TrmError(
            f"{path} is not a trm ONNX solver's card (format {found!r}, not {FORMAT_NAME!r}); "
            "give a folder `trm export MODEL --format onnx` wrote"
        )
    version = card.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TrmError(f"{path}: version {version!r} is not a version number; it is damaged")
    if version > FORMAT_VERSION:
        raise TrmError(
            f"{path} is of card version {version}, newer than the {FORMAT_VERSION} this trm "
            "reads; upgrade trm to run it"
        )
    for key, kind in _REQUIRED.items():
        value = card.get(key)
        if key not in card:
            raise TrmError(f"{path} lacks the field {key!r}; it is damaged (export it again)")
        wrong = not isinstance(value, kind) or isinstance(value, bool)
        if wrong or (kind is int and value < 1):
            raise TrmError(f"{path}: {key} is {value!r}; it is damaged (export it again)")
    if card["halt_rule"] not in HALT_RULES:
        raise TrmError(
            f"{path}: halt_rule {card['halt_rule']!r} is none of {', '.join(HALT_RULES)}; "
            "it is damaged"
        )
    return card


def write_card(card: dict[str, Any], path: Path) -> None:
    """``card`` as indented UTF-8 JSON at ``path``."""
    path.write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
