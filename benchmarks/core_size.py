"""How large the core is against the plugins: non-blank lines of the ``.py`` files under
core/ and plugins/ (comments and docstrings count; blank lines do not), and per sub-package.

    python benchmarks/core_size.py [--ref REF] [--out FILE]

Counts the working tree, or the commit ``--ref`` (read with ``git show``, nothing checked
out). Prints one JSON document (with its provenance) and writes it to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import REPO, provenance

FOLDERS = ("core", "plugins")


def _files(ref: str | None) -> dict[str, str]:
    """The text of every ``.py`` file under core/ and plugins/, by path."""
    if ref is None:
        return {
            str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
            for folder in FOLDERS
            for path in sorted((REPO / folder).rglob("*.py"))
        }
    names = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", ref, *FOLDERS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        name: subprocess.run(
            ["git", "-C", str(REPO), "show", f"{ref}:{name}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for name in names
        if name.endswith(".py")
    }


def non_blank_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def count(ref: str | None) -> dict[str, object]:
    """Non-blank lines per top folder and per folder one level below it."""
    totals: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    for name, text in _files(ref).items():
        lines = non_blank_lines(text)
        top, *rest = Path(name).parts
        totals[top] += lines
        parts["/".join([top, rest[0]]) if len(rest) > 1 else top + "/(top level)"] += lines
    return {
        "core_lines": totals["core"],
        "plugins_lines": totals["plugins"],
        "core_smaller": totals["core"] < totals["plugins"],
        "by_folder": dict(sorted(parts.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", help="a commit to count instead of the working tree")
    parser.add_argument("--out", type=Path, help="also write the document here")
    args = parser.parse_args()
    document = {
        "what": "non-blank lines of the .py files under core/ and plugins/",
        "ref": args.ref or "working tree",
        **count(args.ref),
        "provenance": provenance(),
    }
    text = json.dumps(document, indent=2) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
