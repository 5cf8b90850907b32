"""A shipped model's exact accuracy with one attempt and with K on its manifest's puzzle kinds:
answers the task's rules refuse tried again under the task's symmetries
(``trm eval NAME --attempts K``; trm.evaluation.attempts).

Usage:
  python benchmarks/attempts.py NAME [--attempts K] [--attempts-seed N] [--out FILE]
      [--manifest] [--json]

Each kind of ``NAME``'s manifest (the held-out puzzles built again from its options and
seed) is scored once with K attempts, which gives both figures: ``exact_accuracy`` (the
first attempt, the puzzles as given) and ``exact_accuracy@K``. ``--out FILE`` writes the
document (with benchmarks/provenance.py's block); ``--manifest`` also records the figures in
the shipped ``NAME.json`` (each kind's ``retried``, replacing an entry of the same K and seed),
naming ``--out`` as their results document. Prints a table, or with ``--json`` the document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import attrs
from provenance import provenance
from tables import print_rows

import trm
from trm.evaluation.attempts import at_attempts_key, plan_attempts
from trm.plugins.evaluation.held_out import score_kind
from trm.shipped import MANIFEST_SUFFIX, RetriedAccuracy, shipped_dir

REPO = Path(__file__).resolve().parent.parent


def measure(name: str, attempts: int, seed: int) -> dict[str, Any]:
    """The document: each kind's examples and exact accuracy with 1 and ``attempts``."""
    model = trm.load(name)
    assert model.manifest is not None, f"{name} is not a shipped model"
    plan = plan_attempts(model.source, model.seq_len, attempts, seed, "--attempts")
    key = at_attempts_key(attempts)
    kinds = []
    for kind in model.manifest.kinds:
        score = score_kind(
            model.pm,
            model.payload,
            model.spec,
            model.module,
            model.runtime.placement(),
            kind.options,
            kind.seed,
            kind.count,
            256,
            lambda _line: None,
            f"manifest of {name}, kind {kind.kind!r}",
            plan,
        )
        kinds.append(
            {
                "kind": kind.kind,
                "seed": kind.seed,
                "examples": score.examples,
                "exact_accuracy": score.exact_accuracy,
                key: score.exact_accuracy_at_attempts,
                "cell_accuracy": score.cell_accuracy,
                "manifest_exact_accuracy": kind.exact_accuracy,
            }
        )
    return {
        "model": name,
        "step": model.step,
        "attempts": attempts,
        "attempts_seed": seed,
        "device": model.runtime.device,
        "threads": os.cpu_count(),
        "kinds": kinds,
        "provenance": provenance(),
    }


def record_in_manifest(document: dict[str, Any], results: Path) -> Path:
    """Write each kind's figures into the shipped manifest's ``retried`` (an entry of the
    same attempts and seed replaced); returns the manifest's path."""
    name, attempts, seed = document["model"], document["attempts"], document["attempts_seed"]
    path = shipped_dir() / f"{name}{MANIFEST_SUFFIX}"
    data = json.loads(path.read_text(encoding="utf-8"))
    key = at_attempts_key(attempts)
    command = document["provenance"]["command"]
    shown = str(results.resolve().relative_to(REPO)) if results.is_absolute() else str(results)
    for kind, measured in zip(data["kinds"], document["kinds"], strict=True):
        assert kind["kind"] == measured["kind"] and measured["examples"] == kind["count"]
        entry = RetriedAccuracy(
            attempts=attempts,
            attempts_seed=seed,
            exact_accuracy=measured[key],
            exact_accuracy_one_attempt=measured["exact_accuracy"],
            command=command,
            results=shown,
        )
        kept = [
            r
            for r in kind.get("retried", [])
            if (r["attempts"], r["attempts_seed"]) != (attempts, seed)
        ]
        kind["retried"] = [*kept, attrs.asdict(entry)]
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="a shipped model's name (sudoku9-laptop)")
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--attempts-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the document here")
    parser.add_argument("--manifest", action="store_true", help="record it in NAME.json")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.manifest and args.out is None:
        parser.error("--manifest needs --out FILE (the results document it names)")
    document = measure(args.name, args.attempts, args.attempts_seed)
    if args.out is not None:
        args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if args.manifest:
        print(f"recorded in {record_in_manifest(document, args.out)}", file=sys.stderr)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    key = at_attempts_key(args.attempts)
    print_rows(
        ["kind", "examples", "exact (1 attempt)", f"exact ({args.attempts} attempts)"],
        [
            [k["kind"], str(k["examples"]), f"{k['exact_accuracy']:.1%}", f"{k[key]:.1%}"]
            for k in document["kinds"]
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
