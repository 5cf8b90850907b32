"""DatasetShape: the facts about a dataset that a model's shape, memory and time depend on.

One type everywhere: the estimator's input (``estimate_memory``), the model's constructor
arguments (:meth:`DatasetShape.model_kwargs`), what a checkpoint records, what the loop
reads from the opened train split.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from trm.errors import TrmError

# The fields a model's tensors depend on; a checkpoint must match them to load.
MODEL_FIELDS = ("seq_len", "vocab_size", "num_puzzle_identifiers")


@frozen
class DatasetShape:
    """Shape of a dataset's train split (from dataset.json, or a source's promise).

    ``total_puzzles``, ``total_groups`` and ``train_file_bytes`` (its inputs and labels files)
    are of the train split; 0 when not known. ``epoch_rows`` is the examples one epoch reads
    (one puzzle per group, all its examples); 0 when not known or when every puzzle has one
    example (then it is ``total_groups``: see :attr:`rows_per_epoch`).
    """

    seq_len: int
    vocab_size: int
    num_puzzle_identifiers: int
    total_puzzles: int = 0
    total_groups: int = 0
    train_file_bytes: int = 0
    # derived from the groups and their puzzles' sizes, and only an estimate before the data
    # exist (a source's promise may leave it 0): not part of a shape's identity
    epoch_rows: int = attrs.field(default=0, eq=False)

    @property
    def rows_per_epoch(self) -> int:
        """``epoch_rows``, or ``total_groups`` when it is not known (one example per puzzle)."""
        return self.epoch_rows or self.total_groups

    def model_kwargs(self) -> dict[str, int]:
        """The keyword arguments :class:`trm.model.TinyRecursiveModel` takes from a dataset."""
        return {name: int(getattr(self, name)) for name in MODEL_FIELDS}

    def to_dict(self) -> dict[str, int]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetShape:
        """Inverse of :meth:`to_dict`; also reads checkpoints that recorded only the model
        fields. Raises TrmError when a model field is missing."""
        missing = [name for name in MODEL_FIELDS if name not in data]
        if missing:
            raise TrmError(f"the dataset shape lacks {', '.join(missing)}")
        known = {f.name for f in attrs.fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in known})

    def model_differences(self, other: DatasetShape) -> list[tuple[str, int, int]]:
        """``(field, self's, other's)`` for each model field that differs."""
        return [
            (name, getattr(self, name), getattr(other, name))
            for name in MODEL_FIELDS
            if getattr(self, name) != getattr(other, name)
        ]


def _epoch_rows(meta: dict[str, Any]) -> int:
    """The reference's estimate of an epoch's examples, groups x the mean examples of a
    puzzle; 0 when puzzles have one example each (``rows_per_epoch`` is then the groups)."""
    mean = float(meta.get("mean_puzzle_examples", 1.0))
    return 0 if mean == 1.0 else round(int(meta.get("total_groups", 0)) * mean)


def read_shape(data_dir: Path, split: str = "train") -> DatasetShape:
    """The shape of ``data_dir/split`` from its dataset.json and array files."""
    split_dir = data_dir / split
    try:
        meta = json.loads((split_dir / "dataset.json").read_text(encoding="utf-8"))
        shape = DatasetShape(
            seq_len=int(meta["seq_len"]),
            vocab_size=int(meta["vocab_size"]),
            num_puzzle_identifiers=int(meta["num_puzzle_identifiers"]),
            total_puzzles=int(meta.get("total_puzzles", 0)),
            total_groups=int(meta.get("total_groups", 0)),
            epoch_rows=_epoch_rows(meta),
            train_file_bytes=sum(
                f.stat().st_size
                for f in split_dir.glob("*__*.npy")
                if f.name.endswith(("__inputs.npy", "__labels.npy"))
            ),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TrmError(
            f"cannot read {split_dir / 'dataset.json'} ({exc}); is {data_dir} a built dataset?"
        ) from exc
    return shape
