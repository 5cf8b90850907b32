"""``trm eval CHECKPOINT`` and ``trm solve CHECKPOINT PUZZLE``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trm.cli.output import info, print_json
from trm.data.puzzle_dataset import open_split
from trm.data.sampler import SplitIndex
from trm.device.transfer import to_device
from trm.errors import TrmError
from trm.plan.dataset import find_data_source
from trm.plan.pipeline import choose_runtime, detect_hardware
from trm.plugin_manager import TrmPluginManager, load_plugins
from trm.spec import RunSpec, spec_from_dict
from trm.train.evaluate import evaluate, predict
from trm.train.inference import checkpoint_shape, restore_model


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    ev = commands.add_parser("eval", parents=[common], help="score a checkpoint on held-out data")
    ev.add_argument("checkpoint", type=Path, help="a checkpoint file or a run directory")
    ev.add_argument("--data", type=Path, help="dataset directory (default: the one trained on)")
    ev.add_argument("--split", default=None, help="split to score (default: the spec's eval split)")
    ev.add_argument("--max-examples", type=int, default=0, help="score only the first N")
    ev.add_argument("--batch-size", type=int, default=256)
    ev.add_argument("--json", action="store_true", help="print one JSON document")
    ev.set_defaults(func=run_eval)

    solve = commands.add_parser("solve", parents=[common], help="solve one puzzle")
    solve.add_argument("checkpoint", type=Path, help="a checkpoint file or a run directory")
    solve.add_argument("puzzle", help="the puzzle as text ('.' or 0 for blanks) or a file path")
    solve.add_argument("--json", action="store_true", help="print one JSON document")
    solve.set_defaults(func=run_solve)


def _load(pm: TrmPluginManager, path: Path) -> dict:
    if not path.exists():
        raise TrmError(f"checkpoint {path} does not exist; give a checkpoint file or run dir")
    payload = pm.hook.load_checkpoint(path=path, map_location="cpu")
    if payload is None:
        raise TrmError(f"no checkpoint found at {path}")
    return payload


def _restore(args: argparse.Namespace) -> tuple[TrmPluginManager, dict, Any, RunSpec, Any]:
    """Plugins, checkpoint payload, runtime, spec and the model ready for inference."""
    pm = load_plugins(args.plugins)
    payload = _load(pm, args.checkpoint)
    checkpoint_spec = spec_from_dict(payload["spec"], "checkpoint spec")
    runtime = choose_runtime(pm, checkpoint_spec, detect_hardware(pm))
    spec, model = restore_model(payload, torch.device(runtime.device))
    return pm, payload, runtime, spec, model


def run_eval(args: argparse.Namespace) -> int:
    _, payload, runtime, spec, model = _restore(args)
    device = torch.device(runtime.device)
    data_dir = args.data or Path(payload.get("data_dir") or "")
    split = args.split or spec.data.eval_split
    index = SplitIndex(open_split(data_dir / split))
    result = evaluate(
        model,
        index,
        spec.arch.halt_max_steps,
        args.batch_size,
        device,
        runtime.autocast_dtype,
        args.max_examples,
    )
    result = {
        "checkpoint": str(args.checkpoint),
        "step": payload["step"],
        "split": str(data_dir / split),
        **result,
    }
    if args.json:
        print_json(result)
    else:
        print(
            f"{result['examples']} examples of {result['split']} at step {result['step']}: "
            f"exact accuracy {result['exact_accuracy']:.2%}, "
            f"cell accuracy {result['cell_accuracy']:.2%}"
        )
    return 0


def run_solve(args: argparse.Namespace) -> int:
    pm, payload, runtime, spec, model = _restore(args)
    device = torch.device(runtime.device)
    source = find_data_source(pm, spec.data.source)
    seq_len = checkpoint_shape(payload).seq_len
    text = args.puzzle
    if Path(text).is_file():
        text = Path(text).read_text()
    question = np.asarray(source.parse_puzzle(text, seq_len), dtype=np.int64)
    batch = to_device(
        {
            "inputs": question[None, :],
            "labels": question[None, :],
            "puzzle_identifiers": np.zeros(1, dtype=np.int64),
        },
        device,
    )
    answer = (
        predict(model, batch, spec.arch.halt_max_steps, device, runtime.autocast_dtype)[0]
        .cpu()
        .numpy()
    )
    valid = bool(source.check_answer(question, answer))
    if args.json:
        print_json(
            {
                "question": question.tolist(),
                "answer": answer.tolist(),
                "valid": valid,
                "question_text": source.format_grid(question),
                "answer_text": source.format_grid(answer),
            }
        )
    else:
        print("puzzle:")
        print(source.format_grid(question))
        print("model's answer:")
        print(source.format_grid(answer))
        print("valid solution: " + ("yes" if valid else "no"))
    info(f"solved with {spec.name} at step {payload['step']}")
    return 0
