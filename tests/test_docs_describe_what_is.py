"""Docs, test file names and code describe what is: no development history where users and
readers look. Waves, sessions and issue numbers belong in CHANGELOG.md and git log; a test is
named for what it proves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HISTORY = re.compile(
    r"\bwave\s+\d"
    r"|\bissues?\s+#?\d"
    r"|\bissue's\b"
    r"|\b(?:first|second|third|fourth|fifth|earlier|previous|another)\s+(?:pass|session)\b"
    r"|\bsessions?\s+of\s+wave\b"
    # a rule, form or version described by what it replaced or when it changed
    r"|\b(?:earlier|old|older|former|previous)\s+(?:form|rule|version|default|behaviou?r)s?\b"
    r"|\bafter\s+the\s+(?:\w+\s+)?change\b"
    r"|\b(?:by|under)\s+its\s+\w+\s+then\b"
    r"|\bhow\s+the\s+\w+\s+was\s+(?:found|made|chosen)\b"
    r"|(?:\btrm|\bplugin|`)\s+now\s+(?!that\b)[a-z]+s\b"
    # a value or a part described against what it was
    r"|\(was\s+[-−+]?\d"
    r"|\b(?:estimate|estimator|planner|tier|recipe)\s+now\b"
    r"|\bcan\s+now\b"
    r"|\bsince\s+\d{4}-\d{2}-\d{2}\b"
    r"|\b(?:recipe|spec)'s\s+earlier\b"
    r"|\bbefore\s+th(?:is|e)\s+(?:\w+\s+)?change\b",
    re.IGNORECASE,
)
CODE_FOLDERS = ("core", "plugins", "contrib", "tests", "benchmarks")


def _text_files() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    top = sorted(p for p in ROOT.glob("*.md") if p.name != "CHANGELOG.md")
    specs = [*sorted((ROOT / "specs").glob("*.toml")), ROOT / "pyproject.toml"]
    code = sorted(p for folder in CODE_FOLDERS for p in (ROOT / folder).rglob("*.py"))
    this = Path(__file__).resolve()  # its examples below are history on purpose
    return [p for p in [*docs, *top, *specs, *code] if p.resolve() != this]


def _hits(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(lines, start=1)
        if HISTORY.search(line)
    ]


def test_no_doc_comment_or_docstring_speaks_of_waves_sessions_or_issue_numbers():
    hits = [hit for path in _text_files() for hit in _hits(path)]
    assert hits == [], "history belongs in CHANGELOG.md:\n" + "\n".join(hits)


def test_no_test_file_is_named_for_its_history():
    names = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*") if p.is_file()]
    named = [name for name in names if HISTORY.search(name.replace("_", " "))]
    assert named == []


@pytest.mark.parametrize(
    "line",
    [
        "## Wave 3, second session, in short",
        "the 3x of issue 3 is met",
        "(issue 25, item 10)",
        "tests/test newcomer third pass.py",
        "the issue's signature",
        "### How the recipe was found",
        "bf16 autocast (runtime.precision auto after the rule change)",
        "trm ran this small network eager and in fp32 by its rule then",
        "The `cpu` plugin now trains small networks in bf16",
        "trm's earlier rule stays as a named option",
        "An earlier form passed a boolean mask; trm now builds one additive mask",
        "the estimate is now 18.1 GiB (was 14.7)",
        "The estimator now counts both",
        "`benchmarks/memory_accuracy.py` rows can now set `seq_len`",
        "for the recipe's earlier data: every puzzle exactly 30 clues. Since 2026-11-25",
        "(+5.1%; the estimator before this change: 3.18 GiB)",
    ],
)
def test_the_history_pattern_finds_what_it_is_for(line):
    assert HISTORY.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "the watch now allows 2 threads",
        "what was found on the machine",
        "the rule of the reference, a named option",
        "if now is None:",
    ],
)
def test_the_history_pattern_lets_present_descriptions_through(line):
    assert not HISTORY.search(line)


# The phrasings a review found in the docs, each with the document it was in.
FOUND_IN_DOCS = [
    ("docs/contrib.md", "### How the recipe was found"),
    ("docs/contrib.md", "bf16 autocast (runtime.precision auto after the rule change)"),
    ("docs/performance.md", "trm ran this small network eager and in fp32 by its rule then"),
    ("docs/performance.md", "The `cpu` plugin now trains small networks in bf16"),
    ("docs/arc.md", "trm's earlier rule stays as a named option"),
    ("docs/contrib.md", "An earlier form passed a boolean mask; trm builds one additive mask"),
    ("docs/maze.md", "The estimate now counts glibc's heap slack at seq 900"),
    ("docs/performance.md", "the estimate is now 18.1 GiB (was 14.7) against the 17.7 GiB"),
]


@pytest.mark.parametrize(("name", "line"), FOUND_IN_DOCS)
def test_a_history_phrasing_put_back_into_its_doc_is_caught(tmp_path, name, line):
    """The doc holds none of it today; written back into a copy, the guard finds that line."""
    doc = ROOT / name
    assert _hits(doc) == []
    copy = tmp_path / doc.name
    lines = doc.read_text(encoding="utf-8").splitlines()
    middle = len(lines) // 2
    copy.write_text("\n".join([*lines[:middle], line, *lines[middle:]]), encoding="utf-8")
    caught = [n for n, text in enumerate(copy.read_text().splitlines(), 1) if HISTORY.search(text)]
    assert caught == [middle + 1]
