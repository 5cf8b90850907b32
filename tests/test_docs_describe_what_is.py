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
    r"|(?:\btrm|\bplugin|`)\s+now\s+(?!that\b)[a-z]+s\b",
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
