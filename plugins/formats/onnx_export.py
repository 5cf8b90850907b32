"""``trm export MODEL --format onnx --out DIR``: the solver as an ONNX graph and its card.

The graph is the evaluation path of ``trm solve`` (``trm.evaluation.steps.run_all_steps``:
the model in eval mode, a carry that starts halted so the first step loads the puzzle, every
one of ``halt_max_steps`` supervision steps, no latent noise) with the Python loop over the
steps unrolled: a fixed number of steps and no Loop, Scan or If operator. Its outputs are
every step's answer (argmax token of each cell) and the Q head's logits, so a reader sees the
model refine its answer and decides halting itself (the card's ``halt_rule``). fp32
throughout: the model is traced without autocast.

**Exporter.** torch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``),
which traces the module once. The graph has no control flow that depends on data, so the
torch.export-based (dynamo) exporter's strength, capturing such flow, buys nothing here,
while on this unrolled graph (a 9x9 model: 8 steps x 8 calls of a 2-layer net) it took
minutes where tracing takes seconds (docs/interop.md gives the figures).

A model the format cannot express is refused before anything is written: one trained on a
multi-task mix, a task solved as whole tasks of many rows (ARC), a sliding attention window,
a data source that does not describe its cells (``cell_encoding``, which the card needs).
The folder is assembled beside ``OUT`` and renamed into place.
"""

from __future__ import annotations

import io
import os
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import torch
from attrs import frozen

from trm.errors import TrmError
from trm.plugin_manager import TrmPluginManager
from trm.plugins.formats.exporter import load_trm_checkpoint
from trm.plugins.formats.importer import check_output, write_folder
from trm.plugins.formats.onnx_card import (
    CARD_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    INPUTS,
    MODEL_FILE,
    OUTPUTS,
    write_card,
)
from trm.restore import checkpoint_shape, restore_model
from trm.shipped import looks_like_a_name, shipped_manifest
from trm.spec import RunSpec
from trm.version import __version__

# The opset of the graph: one that onnxruntime (native and web) has long run.
OPSET = 17
EXPORTER = "torch.onnx TorchScript exporter (dynamo=False)"
# Rows the export checks the file on, against the torch model it came from.
PROBE_ROWS = 8
# Rows the graph is traced with (not 1, so that no size-1 broadcast is baked in).
TRACE_ROWS = 2


@frozen
class OnnxExportResult:
    """What ``trm export --format onnx`` wrote and checked: the folder, the graph's size in
    bytes, the steps unrolled, the opset, and the check against torch (``probe_rows`` rows,
    ``probe_equal`` of them with every step's answer equal, ``probe_q_halt_diff`` the
    largest difference of a halting logit)."""

    folder: Path
    model_bytes: int
    steps: int
    opset: int
    step: int
    probe_rows: int
    probe_equal: int
    probe_q_halt_diff: float
    onnxruntime: str


class UnrolledSolver(torch.nn.Module):
    """``model``'s every supervision step on a batch, as ``run_all_steps`` runs them, with
    each step's answer and Q logits stacked: ``(answers int64 [steps, B, seq_len], q_halt
    float32 [steps, B], q_continue float32 [steps, B])``."""

    def __init__(self, model: torch.nn.Module, steps: int) -> None:
        super().__init__()
        self.model = model
        self.steps = steps

    def forward(
        self, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if getattr(self.model, "puzzle_emb", None) is None:
            # a model without a puzzle table reads no identifier; the input stays in the
            # graph (the contract's) through a term that adds nothing
            inputs = inputs + puzzle_identifiers.unsqueeze(1) * 0
        batch = {"inputs": inputs, "labels": inputs, "puzzle_identifiers": puzzle_identifiers}
        carry = self.model.initial_carry(batch)
        answers, q_halt, q_continue = [], [], []
        for _ in range(self.steps):
            carry, outputs = self.model(carry, batch)
            answers.append(outputs["logits"].argmax(dim=-1))
            q_halt.append(outputs["q_halt_logits"].float())
            q_continue.append(outputs["q_continue_logits"].float())
        return torch.stack(answers), torch.stack(q_halt), torch.stack(q_continue)


def onnx_packages() -> tuple[Any, Any]:
    """The ``onnx`` and ``onnxruntime`` modules; TrmError saying how to install them."""
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise TrmError(
            f"the onnx format needs the packages onnx and onnxruntime ({exc.name} is not "
            "installed): pip install 'trm[onnx]'"
        ) from None
    return onnx, onnxruntime


def refusal(spec: RunSpec, payload: dict[str, Any], source: Any) -> str | None:
    """Why the onnx format cannot express this model, in one sentence; None when it can."""
    if payload.get("mix_layout") or spec.data.is_mix:
        return "a model trained on a multi-task mix is not written as one ONNX solver"
    if callable(getattr(source, "solve_task", None)):
        return (
            f"the {source.name} task solves whole tasks of many rows (augmented and voted), "
            "which one ONNX graph of single puzzles does not express"
        )
    if spec.arch.attention_window > 0:
        return f"arch.attention_window = {spec.arch.attention_window} does not export to ONNX"
    if not callable(getattr(source, "cell_encoding", None)):
        return (
            f"the {source.name} data source does not describe its cells (cell_encoding), "
            "which the solver's card needs"
        )
    return None


def _data_source(pm: TrmPluginManager, name: str) -> Any:
    for part in pm.hook.register_data_sources():
        for source in part or ():
            if source.name == name:
                return source
    raise TrmError(
        f"the model was trained on data source {name!r}, which no plugin provides here; "
        "switch its plugin on with --plugins NAME"
    )


def _trace(solver: UnrolledSolver, seq_len: int, path: Path) -> None:
    """Export ``solver`` to ``path``; the TorchScript exporter's warnings and prints
    (deprecation, tracer notes) are kept from the user's terminal."""
    inputs = torch.ones(TRACE_ROWS, seq_len, dtype=torch.int64)
    identifiers = torch.zeros(TRACE_ROWS, dtype=torch.int64)
    batch_axis = {"inputs": {0: "batch"}, "puzzle_identifiers": {0: "batch"}}
    batch_axis.update({name: {1: "batch"} for name in OUTPUTS})
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        with redirect_stderr(io.StringIO()):
            torch.onnx.export(
                solver,
                (inputs, identifiers),
                str(path),
                dynamo=False,
                opset_version=OPSET,
                input_names=list(INPUTS),
                output_names=list(OUTPUTS),
                dynamic_axes=batch_axis,
                do_constant_folding=True,
            )


def loop_operators(path: Path) -> list[str]:
    """The control-flow operators (Loop, Scan, If) in the graph at ``path``."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return sorted({node.op_type for node in graph.node if node.op_type in ("Loop", "Scan", "If")})


def _probe(
    solver: UnrolledSolver, path: Path, seq_len: int, vocab_size: int
) -> tuple[int, float, str]:
    """Run the file with onnxruntime and ``solver`` with torch on PROBE_ROWS rows of random
    tokens: (rows whose every step's answer is equal, largest q_halt difference, runtime
    version)."""
    import onnxruntime

    rng = np.random.default_rng(0)
    inputs = rng.integers(1, vocab_size, size=(PROBE_ROWS, seq_len), dtype=np.int64)
    identifiers = np.zeros(PROBE_ROWS, dtype=np.int64)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    answers, q_halt, _ = session.run(None, {"inputs": inputs, "puzzle_identifiers": identifiers})
    with torch.no_grad():
        want, want_q, _ = solver(torch.from_numpy(inputs), torch.from_numpy(identifiers))
    equal = int((answers == want.numpy()).all(axis=(0, 2)).sum())
    diff = float(np.abs(q_halt - want_q.numpy()).max())
    return equal, diff, onnxruntime.__version__


def export_onnx(pm: TrmPluginManager, source_path: Path, out: Path) -> OnnxExportResult:
    """Write the model ``source_path`` names (a run directory's newest checkpoint, a
    checkpoint file, a model folder, a shipped model's name) into the new folder ``out`` as
    ``model.onnx`` and ``trm-onnx.json``; see the module docstring. TrmError, with nothing
    written, for a model the format cannot express or a missing package."""
    onnx_packages()
    check_output(out)
    payload = load_trm_checkpoint(pm, source_path)
    spec, model = restore_model(payload, torch.device("cpu"))
    source = _data_source(pm, spec.data.source)
    refused = refusal(spec, payload, source)
    if refused is not None:
        raise TrmError(f"--format onnx: {refused}; nothing was written")
    shape = checkpoint_shape(payload)
    model = model.float().eval()
    steps = spec.arch.halt_max_steps
    solver = UnrolledSolver(model, steps).eval()
    encoding = source.cell_encoding(shape.seq_len)
    word = str(source_path)
    shipped = not source_path.exists() and looks_like_a_name(word)
    manifest = shipped_manifest(word) if shipped else None
    step = int(payload.get("step") or 0)
    checked: dict[str, Any] = {}

    def write(staging: Path) -> None:
        graph = staging / MODEL_FILE
        _trace(solver, shape.seq_len, graph)
        found = loop_operators(graph)
        if found:
            raise TrmError(
                f"--format onnx: the traced graph holds {', '.join(found)} operators, which "
                "the solver's contract forbids; nothing was written"
            )
        equal, diff, runtime = _probe(solver, graph, shape.seq_len, shape.vocab_size)
        checked.update(equal=equal, diff=diff, runtime=runtime, bytes=graph.stat().st_size)
        card = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "task": source.name,
            "seq_len": shape.seq_len,
            "steps": steps,
            **encoding,
            "opset": OPSET,
            "halt_rule": "q_halt > 0" if spec.arch.no_ACT_continue else "q_halt > q_continue",
            "file": MODEL_FILE,
            "inputs": INPUTS,
            "outputs": OUTPUTS,
            "puzzle_identifier": 0,
            "exported_with": {
                "torch": torch.__version__,
                "trm": __version__,
                "exporter": EXPORTER,
            },
            "tested_runtime": {"onnxruntime": runtime},
            "model": {
                "name": manifest.name if manifest is not None else spec.name,
                "source": word,
                "step": step,
                "puzzle": manifest.puzzle if manifest is not None else None,
                "parameters": sum(p.numel() for p in model.parameters()),
            },
        }
        write_card(card, staging / CARD_FILE)
        # give the graph the permissions every other file of the folder has (the umask's)
        os.chmod(graph, (staging / CARD_FILE).stat().st_mode & 0o777)

    write_folder(out, "exporting", write)
    return OnnxExportResult(
        folder=out,
        model_bytes=int(checked["bytes"]),
        steps=steps,
        opset=OPSET,
        step=step,
        probe_rows=PROBE_ROWS,
        probe_equal=int(checked["equal"]),
        probe_q_halt_diff=float(checked["diff"]),
        onnxruntime=str(checked["runtime"]),
    )
