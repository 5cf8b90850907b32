"""The ARC data source's scoring members, as a mix-in for its DataSource class.

``ArcScoring`` gives the source the optional members the core looks up
(``trm.data.source``): ``primary_metric`` (pass@2 picks the best checkpoint), ``evaluator``
(votes and pass@K, :mod:`.evaluator`) and ``solve_task`` (``trm solve``, :mod:`.solve`).
"""

from __future__ import annotations

from pathlib import Path

from trm.data.evaluator import RunRows, TaskSolution
from trm.plugins.tasks.arc.evaluator import PRIMARY_METRIC, ArcEvaluator, ArcTestSet
from trm.plugins.tasks.arc.solve import solve_task

EVAL_SPLIT = "test"


class ArcScoring:
    """Mix into the ARC DataSource class: ``class ArcSource(ArcScoring): ...``."""

    primary_metric = PRIMARY_METRIC

    def evaluator(self, data_dir: Path, split: str) -> ArcEvaluator | None:
        """An empty evaluator for ``data_dir/test`` (None for other splits: their rows are no
        test inputs); TrmError when the dataset lacks its identifiers or test tasks."""
        if split != EVAL_SPLIT:
            return None
        return ArcEvaluator(ArcTestSet.from_dataset(Path(data_dir)))

    def solve_task(
        self,
        argument: str,
        data_dir: Path | None,
        seq_len: int,
        run: RunRows,
        picture: Path | None,
    ) -> TaskSolution:
        """``trm solve`` for an ARC task (:func:`trm.plugins.tasks.arc.solve.solve_task`)."""
        return solve_task(argument, data_dir, seq_len, run, picture)
