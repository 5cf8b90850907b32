"""The shared layout of a multi-task mix: how each task's rows, tokens and puzzle identifiers
sit in the one dataset a mixed model trains on.

- **Rows**: every row is ``seq_len`` tokens, the longest task's; a shorter task's rows are
  padded at their end with the pad token (inputs) and the ignore label (labels).
- **Tokens**: token 0 is the shared pad, and the shared ignore label of the labels. Task
  ``k``'s other tokens follow, in their order, from its ``token_offset``: a task token ``t``
  (not the task's pad) becomes ``token_offset + t - (t > pad_id)``. Tasks' tokens never
  collide, so the model cannot mistake a maze wall for a Sudoku digit. A label cell that was
  the task's ignore label or its pad is not scored in the mix.
- **Puzzle identifiers**: task ``k``'s identifier ``i`` becomes ``identifier_offset + i``.

A mixed dataset's root holds this layout as ``mix.json`` (:data:`MIX_FILE`); checkpoints and
``trm solve``/``trm eval`` read it from there (:func:`read_layout`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from attrs import frozen

from trm.errors import TrmError

MIX_FILE = "mix.json"
PAD = 0  # the shared pad token and the shared ignore label of a mixed dataset


@frozen
class MixTask:
    """One task of a mix: its name, data source and sampling weight; its own row length,
    vocabulary, pad, ignore label and identifiers; where its tokens and identifiers start in
    the mix; and the folder of its own dataset (``data_dir``, absolute)."""

    name: str
    source: str
    weight: float
    seq_len: int
    vocab_size: int
    pad_id: int
    ignore_label_id: int | None
    num_puzzle_identifiers: int
    token_offset: int
    identifier_offset: int
    data_dir: str = ""

    def token_table(self) -> np.ndarray:
        """int64 [vocab_size]: the mixed token of each of the task's tokens."""
        tokens = np.arange(self.vocab_size, dtype=np.int64)
        table = self.token_offset + tokens - (tokens > self.pad_id)
        table[self.pad_id] = PAD
        return table


@frozen
class MixLayout:
    """The tasks of a mix (in ``[[data.mix]]`` order) and the shape they share."""

    tasks: tuple[MixTask, ...]

    @property
    def seq_len(self) -> int:
        return max(task.seq_len for task in self.tasks)

    @property
    def vocab_size(self) -> int:
        last = self.tasks[-1]
        return last.token_offset + last.vocab_size - 1

    @property
    def num_puzzle_identifiers(self) -> int:
        last = self.tasks[-1]
        return last.identifier_offset + last.num_puzzle_identifiers

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(task.name for task in self.tasks)

    def task(self, name: str) -> MixTask:
        """The task called ``name``; TrmError naming the tasks there are."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise TrmError(
            f"--task {name}: the model learned no task of that name; its tasks are "
            f"{', '.join(self.names)}"
        )

    def weights(self) -> np.ndarray:
        """The tasks' sampling probabilities (the weights, normalised)."""
        weights = np.array([task.weight for task in self.tasks], dtype=np.float64)
        return weights / weights.sum()

    def to_mixed(self, name: str, tokens: np.ndarray, labels: bool = False) -> np.ndarray:
        """Rows ``[..., task seq_len]`` of task ``name``'s tokens in the mix's encoding,
        padded to the mix's ``seq_len``. ``labels``: the task's ignore label becomes the
        shared ignore label (0). Raises TrmError for a token outside the task's vocabulary."""
        task = self.task(name)
        tokens = np.asarray(tokens)
        if tokens.shape[-1] != task.seq_len:
            raise TrmError(
                f"task {name}: rows of {tokens.shape[-1]} tokens, the task's are {task.seq_len}"
            )
        values = tokens.astype(np.int64)
        ignored = np.zeros(values.shape, dtype=bool)
        if labels and task.ignore_label_id is not None:
            ignored = values == task.ignore_label_id
        if ((values < 0) | (values >= task.vocab_size))[~ignored].any():
            raise TrmError(f"task {name}: a token outside the task's vocabulary")
        mixed = task.token_table()[np.where(ignored, task.pad_id, values)]
        out = np.full((*tokens.shape[:-1], self.seq_len), PAD, dtype=np.int64)
        out[..., : task.seq_len] = mixed
        return out

    def from_mixed(self, name: str, tokens: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`to_mixed`: rows of mixed tokens as task ``name``'s tokens, cut to
        its ``seq_len``; a token of another task (or the pad) becomes the task's pad."""
        task = self.task(name)
        values = np.asarray(tokens, dtype=np.int64)[..., : task.seq_len]
        rank = values - task.token_offset
        mine = (rank >= 0) & (rank < task.vocab_size - 1)
        original = rank + (rank >= task.pad_id)
        return np.where(mine, original, task.pad_id).astype(np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": [attrs.asdict(task) for task in self.tasks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MixLayout:
        """Inverse of :meth:`to_dict`; TrmError for a malformed document."""
        try:
            return cls(tasks=tuple(MixTask(**task) for task in data["tasks"]))
        except (KeyError, TypeError) as exc:
            raise TrmError(f"a mix layout that cannot be read ({exc}); rebuild the data") from None


def plan_layout(entries: list[dict[str, Any]]) -> MixLayout:
    """The layout of tasks given in order as dicts of MixTask's fields without the offsets:
    each task's tokens follow the previous tasks', its identifiers too."""
    tasks, token_offset, identifier_offset = [], 1, 0
    for entry in entries:
        task = MixTask(**entry, token_offset=token_offset, identifier_offset=identifier_offset)
        tasks.append(task)
        token_offset += task.vocab_size - 1
        identifier_offset += task.num_puzzle_identifiers
    return MixLayout(tuple(tasks))


def read_layout(data_dir: Path) -> MixLayout | None:
    """The layout recorded in ``data_dir/mix.json``; None when ``data_dir`` is no mix."""
    file = Path(data_dir) / MIX_FILE
    if not file.is_file():
        return None
    try:
        return MixLayout.from_dict(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise TrmError(f"{file} cannot be read ({exc}); rebuild the data") from None


def write_layout(data_dir: Path, layout: MixLayout) -> None:
    (Path(data_dir) / MIX_FILE).write_text(json.dumps(layout.to_dict(), indent=2) + "\n")
