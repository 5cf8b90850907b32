"""What :func:`trm.train` returns: :class:`Run`, a run directory with its typed
:class:`RunSummary` (summary.json), its metrics and its report."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from trm.errors import TrmError


@attrs.frozen(eq=False)  # compared as the mapping it is: equal to summary.json's content
class RunSummary(Mapping[str, Any]):
    """summary.json of a run, typed: how it ended and what it reached.

    ``stopped`` is "finished", "max_steps", "interrupted", "terminated", "failed" or a
    plugin's reason, ``error`` the failure's message (else None); ``steps`` the optimizer
    steps taken in all, ``samples`` the training samples seen, ``wall_s`` the seconds spent
    training; ``best_exact_accuracy`` the best held-out exact accuracy (a fraction; None when
    no evaluation ran) at ``best_step``; ``final_exact_accuracy`` that of the last
    evaluation; ``final_weights_sha256`` the fingerprint of the final weights;
    ``checkpoint_step`` the step of the newest checkpoint (None: none was written).
    docs/user-guide.md lists every field of the file; all of them, typed here or not, are in
    :attr:`document`, and the summary reads as a mapping of them (``summary["steps"]``).
    """

    stopped: str
    steps: int
    samples: int
    wall_s: float
    error: str | None = None
    best_exact_accuracy: float | None = None
    best_step: int | None = None
    final_exact_accuracy: float | None = None
    final_weights_sha256: str | None = None
    checkpoint_step: int | None = None
    document: dict[str, Any] = attrs.field(factory=dict, repr=False)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> RunSummary:
        """The summary of summary.json's content ``document``."""
        typed = {f.name for f in attrs.fields(cls)} - {"document"}
        return cls(**{k: v for k, v in document.items() if k in typed}, document=dict(document))

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)


@attrs.frozen
class Run:
    """A finished (or stopped) run: its directory ``path`` and its :class:`RunSummary`.

    On ranks other than 0 under torchrun nothing is written, so :attr:`metrics` and
    :meth:`report` read rank 0's files when the folder is shared.
    """

    path: Path
    summary: RunSummary

    @property
    def dir(self) -> Path:
        """The run directory: :attr:`path` under the name scripts written for earlier
        releases use."""
        return self.path

    @property
    def stopped(self) -> str:
        """How the run ended (:attr:`RunSummary.stopped`)."""
        return self.summary.stopped

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl, oldest first, each as written (training rows, and
        rows with ``kind`` "eval" or "event"; docs/user-guide.md lists every field). Read
        afresh on each access; a last line cut short by a crash is left out."""
        path = self.path / "metrics.jsonl"
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise TrmError(f"{path} does not exist: the run wrote no metrics") from None
        rows = []
        for number, line in enumerate(lines, start=1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if number < len(lines):
                    raise TrmError(
                        f"{path} line {number} is not JSON; the file is damaged"
                    ) from None
        return rows

    def report(self, out: Path | str | None = None) -> Any:
        """Write the report ``trm report RUN_DIR --out OUT`` writes (plots, index.html,
        report.json) into ``out`` (default ``RUN_DIR/report``, replacing one there); returns
        it (``out_dir``, ``pngs``, ``document``). TrmError when ``out`` cannot be written.
        The ``report`` plugin makes it (the ``api_functions`` hook's ``"report"``)."""
        from trm.plugin_manager import load_plugins

        make_report = load_plugins().api_function("report")  # matplotlib loads when called

        return make_report([self.path], Path(out) if out is not None else self.path / "report")
