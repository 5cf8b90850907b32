"""Count the ARC builds without writing them: identifiers, groups and examples of each split and
the bytes of the puzzle-embedding table, from trm's augmentation draws.

Usage: python benchmarks/arc_sizes.py [--augment 1000] [--concept DIR] [--markdown]
[--json] [--out FILE]. Four builds are counted: ARC-AGI-1 and ARC-AGI-2, each with and
without ConceptARC (which defaults to ../shared/data/arc next to the project, as in
benchmarks/arc_build.py). The draws are the ones ``trm data build arc`` makes
(``plugins/tasks/arc/source.plan_build``, seed 0); nothing is written, so a build's time, peak
memory and size on disk are not among the figures (benchmarks/arc_build.py measures those).
Each build takes a minute or more of one core (``count_s``: its wall time).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from provenance import provenance
from tables import print_rows

CONCEPT = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "arc"
# The puzzle embedding of the paper's ARC specs: one 512-wide float32 row per identifier.
EMBEDDING_WIDTH = 512
FLOAT32_BYTES = 4
BYTES_PER_GIB = 2**30


def count_build(version: int, augment: int, concept: str) -> dict[str, Any]:
    """The counts of one build: ``version`` 1 or 2, ``augment`` versions per task, ConceptARC
    from the folder ``concept`` ('' leaves it out)."""
    from trm.plugins.tasks.arc.source import ArcBuildOptions, _split_counts, plan_build

    options = ArcBuildOptions(version=version, augment=augment, concept=concept)
    started = time.monotonic()
    plans, _ = plan_build(options, 0, lambda _message: None)
    train, test = _split_counts(plans, "train"), _split_counts(plans, "test")
    identifiers = 1 + sum(plan.versions for plan in plans)
    return {
        "build": f"ARC-AGI-{version} " + ("+ ConceptARC" if concept else "without ConceptARC"),
        "version": version,
        "concept": bool(concept),
        "augment": augment,
        "identifiers": identifiers,
        "train_groups": train.groups,
        "train_examples": train.examples,
        "test_groups": test.groups,
        "test_examples": test.examples,
        "puzzle_table_bytes": identifiers * EMBEDDING_WIDTH * FLOAT32_BYTES,
        "count_s": round(time.monotonic() - started, 1),
    }


def print_table(rows: list[dict[str, Any]], markdown: bool) -> None:
    """The builds as the table of docs/arc.md ("Sizes")."""
    headers = [
        "build",
        "identifiers",
        "train groups",
        "train examples",
        "test groups",
        "test examples",
        f"puzzle table (×{EMBEDDING_WIDTH} float32)",
    ]
    print_rows(
        headers,
        [
            [
                row["build"],
                f"{row['identifiers']:,}",
                f"{row['train_groups']:,}",
                f"{row['train_examples']:,}",
                f"{row['test_groups']:,}",
                f"{row['test_examples']:,}",
                f"{row['puzzle_table_bytes'] / BYTES_PER_GIB:.1f} GiB",
            ]
            for row in rows
        ],
        markdown=markdown,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--augment", type=int, default=1000, help="versions per task")
    parser.add_argument("--concept", default=str(CONCEPT), help="ConceptARC folder")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--json", action="store_true", help="print the JSON document")
    parser.add_argument("--out", help="also write the JSON document to this file")
    args = parser.parse_args()
    concept = str(Path(args.concept).resolve())
    rows = [
        count_build(version, args.augment, folder) for version in (1, 2) for folder in (concept, "")
    ]
    document = {"provenance": provenance(), "augment": args.augment, "builds": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print_table(rows, args.markdown)


if __name__ == "__main__":
    main()
