"""A puzzle as the user gives it — text, or a file holding it — read into a token row
through the task's data source (``parse_puzzle``), with the one-line messages ``trm solve``
shows. NumPy only: the torch model (trm.api.model) and a torch-free solver (the ONNX
format's) read puzzles with the same functions, so they refuse the same puzzles alike.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from trm.errors import TrmError

# Characters a puzzle written as text may consist of; such an argument is never a folder.
_PUZZLE_CHARS = set("0123456789.|-+ \t")


def puzzle_argument(argument: str) -> str | Path:
    """A command line's puzzle argument as :meth:`Model.solve` takes it: the Path of the
    file it names, or the text itself. TrmError for a folder (unless the argument is also
    puzzle text: digits and dots are never taken for a folder)."""
    candidate = argument.strip()
    if not candidate or "\n" in candidate:
        return argument
    path = Path(candidate).expanduser()
    try:
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):  # too long or odd for a path: it is the puzzle itself
        return argument
    if is_dir and not set(candidate) <= _PUZZLE_CHARS:
        raise TrmError(
            f"puzzle {candidate} is a folder; give the puzzle as text or a file holding it"
        )
    return path if is_file else argument


def _read_puzzle_file(path: Path) -> str:
    """The text of a puzzle file; TrmError when it cannot be read or is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TrmError(
            f"puzzle file {path} cannot be read ({exc.strerror or exc}); check its permissions "
            "or give the puzzle as text"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrmError(
            f"puzzle file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); save the puzzle as plain text"
        ) from None


def _looks_like_a_file_name(argument: str) -> bool:
    """True for one word with a folder separator or a file extension of letters
    (``mazes/hard.txt``, ``puzzle.txt``): what a user who meant a file typed."""
    word = argument.strip()
    if not word or any(ch.isspace() for ch in word):
        return False
    suffix = Path(word).suffix[1:]
    return "/" in word or os.sep in word or (suffix.isalpha() and suffix.isascii())


def parse_puzzle(source: Any, puzzle: str | os.PathLike[str], seq_len: int) -> np.ndarray:
    """``puzzle`` as ``seq_len`` tokens through the source's ``parse_puzzle``: text in the
    task's format, or a path (:class:`pathlib.Path`) of a file holding it. A text is never
    read as a file name. TrmError naming what is wrong (and the file, if one)."""
    if isinstance(puzzle, os.PathLike):
        path: Path | None = Path(puzzle).expanduser()
        if path.is_dir():
            raise TrmError(f"puzzle {path} is a folder; give a file holding the puzzle")
        if not path.is_file():
            raise TrmError(f"puzzle file {path} does not exist; check the file name")
        text = _read_puzzle_file(path)
    elif isinstance(puzzle, str):
        path, text = None, puzzle
    else:
        raise TrmError(
            "the puzzle must be text (or a pathlib.Path of a file holding it), "
            f"not {type(puzzle).__name__}"
        )
    try:
        tokens = source.parse_puzzle(text, seq_len)
    except TrmError as exc:
        if path is None:
            if _looks_like_a_file_name(text):
                word = text.strip()
                if Path(word).expanduser().is_dir():
                    raise TrmError(
                        f"puzzle {word} is a folder, not a puzzle; give the puzzle as text or "
                        "a pathlib.Path of a file holding it"
                    ) from None
                if Path(word).expanduser().is_file():
                    raise TrmError(
                        f"{exc}; {word} is a file: pass pathlib.Path({word!r}) to solve the "
                        "puzzle it holds"
                    ) from None
                raise TrmError(
                    f"puzzle file {word} does not exist (read as the puzzle itself "
                    f"it is not one: {exc}); check the file name"
                ) from None
            raise
        raise TrmError(f"{exc} (read from puzzle file {path})") from None
    except (ValueError, TypeError, IndexError) as exc:  # a source that breaks its contract
        where = f"puzzle file {path}" if path else "the puzzle"
        raise TrmError(f"{where} cannot be parsed by the {source.name} source: {exc}") from None
    question = np.asarray(tokens, dtype=np.int64).ravel()
    if question.shape != (seq_len,):
        raise TrmError(
            f"the puzzle has {question.size} cells; the checkpoint's model takes {seq_len}"
        )
    return question
