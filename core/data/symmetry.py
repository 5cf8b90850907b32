"""A symmetry of a task: a map of puzzles that keeps the task's answer, up to the same map.

A data source that has symmetries returns them from its optional ``answer_symmetries``
method (see :class:`trm.data.source.DataSource`) as :class:`CellSymmetry` values: a
permutation of the cells of a token row and a relabelling of its tokens. Mapping a puzzle
forward and the model's answer to it back (:meth:`CellSymmetry.inverse`) gives an answer to
the puzzle as given, which the task's rules (``check_answer``) judge as they judge any other.
A Sudoku's digit relabellings, its row, column, band and stack permutations and its
transposition are such maps; so are a square maze's eight dihedral maps.
:func:`check_attempts` says whether a source can be asked for a number of attempts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from attrs import field, frozen

from trm.errors import TrmError

# At most this many attempts of a puzzle, everywhere (train.eval_attempts has the same bound).
MAX_ATTEMPTS = 1024
# The largest seed a draw takes (a seed of --attempts-seed, --explore-seed).
MAX_DRAW_SEED = 2**63 - 1


def _int_array(value: object) -> np.ndarray:
    return np.asarray(value, dtype=np.int64).ravel()


@frozen
class CellSymmetry:
    """Row ``r`` maps to ``tokens[r[positions]]``: cell ``i`` of the image holds cell
    ``positions[i]`` of ``r``, relabelled through ``tokens`` (a permutation of the token ids
    ``0 .. len(tokens) - 1``; a token beyond the table keeps its id).

    ``positions`` must be a permutation of ``0 .. seq_len - 1`` and ``tokens`` a permutation
    of its indices (ValueError otherwise), so that every map has an inverse.
    """

    positions: np.ndarray = field(converter=_int_array, eq=False)
    tokens: np.ndarray = field(converter=_int_array, eq=False)

    def __attrs_post_init__(self) -> None:
        for name, values in (("positions", self.positions), ("tokens", self.tokens)):
            if not np.array_equal(np.sort(values), np.arange(values.size)):
                raise ValueError(
                    f"CellSymmetry.{name} is not a permutation of 0..{values.size - 1}"
                )

    def forward(self, rows: np.ndarray) -> np.ndarray:
        """The images of token rows ``[..., seq_len]`` (same dtype)."""
        return _relabel(np.asarray(rows)[..., self.positions], self.tokens)

    def inverse(self, rows: np.ndarray) -> np.ndarray:
        """The rows whose images are ``rows`` (``inverse(forward(r)) == r``; same dtype)."""
        back = np.empty_like(self.positions)
        back[self.positions] = np.arange(self.positions.size)
        labels = np.empty_like(self.tokens)
        labels[self.tokens] = np.arange(self.tokens.size)
        return _relabel(np.asarray(rows)[..., back], labels)

    def then(self, other: CellSymmetry) -> CellSymmetry:
        """The symmetry that applies ``self`` first and ``other`` after it."""
        size = max(self.tokens.size, other.tokens.size)
        first, second = _padded(self.tokens, size), _padded(other.tokens, size)
        return CellSymmetry(positions=self.positions[other.positions], tokens=second[first])

    def is_identity(self) -> bool:
        """True when the map leaves every row as it is."""
        cells, ids = np.arange(self.positions.size), np.arange(self.tokens.size)
        return bool(np.array_equal(self.positions, cells) and np.array_equal(self.tokens, ids))


def _relabel(rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``rows`` with each token id ``t < len(tokens)`` replaced by ``tokens[t]``."""
    values = rows.astype(np.int64)
    known = (values >= 0) & (values < tokens.size)
    mapped = np.where(known, tokens[np.clip(values, 0, tokens.size - 1)], values)
    return mapped.astype(rows.dtype)


def _padded(tokens: np.ndarray, size: int) -> np.ndarray:
    """``tokens`` extended by the identity up to ``size`` ids."""
    return np.concatenate([tokens, np.arange(tokens.size, size)])


def check_attempts(source: Any, attempts: int, where: str) -> None:
    """TrmError naming ``where`` unless ``source`` can give ``attempts`` attempts (before
    the puzzles' shape is known: the source has symmetries at all)."""
    check_attempts_count(attempts, where)
    if attempts > 1 and not callable(getattr(source, "answer_symmetries", None)):
        raise no_symmetries(source, attempts, where)


def check_attempts_count(attempts: int, where: str) -> None:
    """TrmError naming ``where`` unless ``attempts`` is a whole number in 1..MAX_ATTEMPTS."""
    if isinstance(attempts, bool) or not isinstance(attempts, (int, np.integer)):
        raise TrmError(f"{where} must be a whole number of at least 1, not {attempts!r}")
    if attempts < 1:
        raise TrmError(f"{where} must be at least 1 (1: the puzzle as given), got {attempts}")
    if attempts > MAX_ATTEMPTS:
        raise TrmError(
            f"{where} must be at most {MAX_ATTEMPTS} (as train.eval_attempts), got {attempts}"
        )


def check_seed(seed: object, where: str) -> None:
    """TrmError naming ``where`` unless ``seed`` is a whole number in 0..MAX_DRAW_SEED."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TrmError(f"{where} must be a whole number of 0 or more, not {seed!r}")
    if not 0 <= seed <= MAX_DRAW_SEED:
        raise TrmError(f"{where} must be between 0 and {MAX_DRAW_SEED}, got {seed}")


def no_symmetries(source: Any, attempts: int, where: str) -> TrmError:
    """The error for ``attempts`` (more than one) of a source without symmetries."""
    return TrmError(
        f"{where} {attempts}: the {source.name} source has no symmetries to try its puzzles "
        f"again under{_own_vote(source)}; use {where} 1"
    )


def _own_vote(source: Any) -> str:
    """What to say of a task that votes over its own augmented versions (ARC)."""
    if callable(getattr(source, "evaluator", None)) or callable(
        getattr(source, "solve_task", None)
    ):
        return " (it votes over its own augmented versions)"
    return ""
