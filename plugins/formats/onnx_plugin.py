"""The ``onnx`` plugin (on by default): the ``onnx`` model format — a trained model as an
ONNX solver with every supervision step unrolled, and ``trm solve`` / ``trm.load`` of such
a folder with onnxruntime, without torch.

    trm export MODEL --format onnx --out DIR     DIR/model.onnx and DIR/trm-onnx.json
    trm solve DIR PUZZLE [--json]                onnxruntime; torch is never imported

Registered in both the ``trm.plugins`` and the ``trm.solvers`` entry-point groups: this
module imports neither torch nor onnx (the export, :mod:`.onnx_export`, imports torch and
onnx when it runs; the solver, :mod:`.onnx_solver`, onnxruntime). The packages come with
``pip install 'trm[onnx]'``; without them the export and the solver say so in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trm.errors import TrmError
from trm.formats import Exported, ModelFormat, Solver
from trm.hookspecs import hookimpl
from trm.plugin_manager import TrmPluginManager
from trm.plugins.formats.onnx_card import CARD_FILE, MODEL_FILE, is_solver_folder

ACTIVATION = "default"


def is_onnx_solver(path: Path) -> bool:
    """True for a solver folder (it holds the card), a folder holding ``model.onnx``, or a
    ``.onnx`` file: what the format claims (a damaged one too, which reading names)."""
    if path.is_dir():
        return is_solver_folder(path) or (path / MODEL_FILE).is_file()
    return path.suffix == ".onnx" and path.is_file()


class OnnxFormat(ModelFormat):
    """The solver as one ONNX graph (``model.onnx``) and its card (``trm-onnx.json``)."""

    name = "onnx"
    summary = (
        "an ONNX solver, every supervision step unrolled (model.onnx, trm-onnx.json), run "
        "by trm solve with onnxruntime"
    )
    noun = "ONNX solver"

    def export(
        self, pm: TrmPluginManager, source: Path, out: Path, options: argparse.Namespace
    ) -> Exported:
        from trm.plugins.formats.onnx_export import export_onnx

        result = export_onnx(pm, source, out)
        lines = (
            f"wrote {result.folder / MODEL_FILE} ({result.model_bytes:,} bytes, opset "
            f"{result.opset}, {result.steps} supervision steps unrolled) and "
            f"{result.folder / CARD_FILE}",
            f"checked with onnxruntime {result.onnxruntime}: {result.probe_equal} of "
            f"{result.probe_rows} probe rows give torch's answer at every step (largest "
            f"q_halt difference {result.probe_q_halt_diff:.2g})",
            f"solve with: trm solve {result.folder} PUZZLE",
        )
        document = {
            "folder": str(result.folder),
            "model": str(result.folder / MODEL_FILE),
            "card": str(result.folder / CARD_FILE),
            "model_bytes": result.model_bytes,
            "steps": result.steps,
            "opset": result.opset,
            "step": result.step,
            "onnxruntime": result.onnxruntime,
            "probe_rows": result.probe_rows,
            "probe_equal": result.probe_equal,
            "probe_q_halt_diff": result.probe_q_halt_diff,
        }
        return Exported(lines, document)

    def solver(self, pm: TrmPluginManager, path: Path) -> Solver | None:
        if not is_onnx_solver(path):
            return None
        from trm.plugins.formats.onnx_solver import open_solver

        return open_solver(pm, path)

    def is_model(self, path: Path) -> bool:
        return is_onnx_solver(path)

    def read_payload(self, path: Path) -> dict[str, Any]:
        raise TrmError(
            f"{path} is an ONNX solver: it holds no checkpoint to evaluate or train from; "
            "`trm solve DIR PUZZLE [--json]` and trm.load run it; for trm eval, --init-from, "
            "--attempts or --explore give the run or checkpoint it was exported from"
        )


@hookimpl
def register_formats() -> list[ModelFormat]:
    return [OnnxFormat()]
