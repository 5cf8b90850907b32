"""A figure measured in the prose of the docs names the document that holds it.

The rule, for every document under docs/ and README.md (tables have theirs, in
tests/test_docs_figures.py):

- A *paragraph* is a run of non-blank lines outside headings, tables, code blocks (fenced,
  or indented four spaces after a blank line) and HTML comment lines; each list item (with its
  continuation lines) is a paragraph of its own.
- A paragraph *holds a measured figure* when a number outside code spans carries a unit of
  measure: a percentage, a time, a size, a FLOP count or a rate ``…/s`` (``MEASURE`` below).
- Such a paragraph either **names a results document**, ``benchmarks/results/<file>.json``
  or ``weights/<name>.json``, or is **marked** ``<!-- not measured: WHY -->`` on the line right
  above it, WHY said in words: a configuration value, a limit a flag promises, a paper's
  published figure with its citation, an estimate, an example of a command's output. A marked
  paragraph says nowhere that something is "measured" (other than "not measured").
- Every document a paragraph names exists.
- No paragraph says "not recorded": a figure without its document is removed, and the prose
  says that it is not measured.

Figures inside code spans (a flag's value, a constant, a line of output) are not prose
figures. The rule asks for the document's name, not for each figure to be among its values:
a paragraph's figures are rounded, ranged and combined in ways a table's are not.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from attrs import define

from tests.test_docs_figures import (
    CLAIMS_MEASURED,
    CODE_SPAN,
    DOCS,
    FILE_PATTERN,
    NOT_MEASURED,
    NOT_RECORDED,
)

REPO = Path(__file__).resolve().parent.parent
PERFORMANCE = REPO / "docs" / "performance.md"
# A number carrying a unit of measure: a percentage, a time, a size, a FLOP count, a rate.
MEASURE = re.compile(
    r"(?<![\d.,])\d(?:[\d,.]*\d)?\s*(?:%"
    r"|(?:ms|µs|s|min|h|seconds?|minutes?|hours?|days?|weeks?|years?|bytes|[KMGT]i?B"
    r"|[GT]FLOPs?)(?![\w-])"
    r"|[\w ]*/s\b)"
)
LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d+[.)])\s")
MARKER_HELP = "<!-- not measured: WHY -->"


@define(frozen=True)
class Paragraph:
    """A paragraph of a document: its first line's number (1-based), its text (lines joined by
    a space) and the line right above it."""

    line: int
    text: str
    above: str


def paragraphs(text: str) -> list[Paragraph]:
    """The prose paragraphs of a Markdown ``text``, as this test's docstring defines them."""
    lines = text.splitlines()
    found: list[Paragraph] = []
    current: list[str] = []
    start = 0
    fenced = False

    def close() -> None:
        if current:
            above = lines[start - 2] if start >= 2 else ""
            found.append(Paragraph(line=start, text=" ".join(current), above=above))
            current.clear()

    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        indented_code = line.startswith("    ") and not current and not _in_list(lines, number)
        if fenced or not stripped or stripped.startswith(("|", "<!--", "#")) or indented_code:
            close()
            continue
        item = LIST_ITEM.match(line)
        # An ordered item other than "1." cannot interrupt a paragraph that is no list item
        # ("... at step\n400. At ..." continues it), as in CommonMark.
        if item and current and not LIST_ITEM.match(current[0]):
            item = not item.group(0).strip()[0].isdigit() or item.group(0).strip()[:-1] == "1"
        if item:
            close()
        if not current:
            start = number
        current.append(stripped)
    close()
    return found


def _in_list(lines: list[str], number: int) -> bool:
    """Whether line ``number`` (1-based) follows a list item with only blank or indented
    lines between: an indented paragraph of the item, not a code block."""
    for line in reversed(lines[: number - 1]):
        if line.strip() and not line.startswith(" "):
            return bool(LIST_ITEM.match(line))
    return False


def measured_figures(paragraph: Paragraph) -> list[str]:
    """The numbers with a unit of measure in a paragraph, code spans left out."""
    return [match.group(0) for match in MEASURE.finditer(CODE_SPAN.sub(" ", paragraph.text))]


def paragraph_problems(paragraph: Paragraph, repo: Path) -> list[str]:
    """What is wrong with one paragraph by the rule; empty when nothing is."""
    where = f"paragraph at line {paragraph.line}"
    problems = [
        f"{where} names {name}, which does not exist"
        for name in FILE_PATTERN.findall(paragraph.text)
        if not (repo / name).is_file()
    ]
    if NOT_RECORDED in paragraph.text.lower():
        problems.append(
            f"{where} says {NOT_RECORDED!r}: name the figure's results document, or remove "
            "the figure and say that it is not measured"
        )
    figures = measured_figures(paragraph)
    marked = bool(NOT_MEASURED.fullmatch(paragraph.above.strip()))
    if marked and CLAIMS_MEASURED.search(paragraph.text):
        problems.append(
            f"{where} is marked 'not measured' but says measured: name the results document "
            "of its figures instead of the mark"
        )
    if figures and not marked and not FILE_PATTERN.search(paragraph.text):
        problems.append(
            f"{where} holds measured figures ({', '.join(repr(f) for f in figures[:4])}) but "
            "names no results document: name `benchmarks/results/<file>.json` (or "
            f"`weights/<name>.json`) in it, remove the figures, or mark it {MARKER_HELP} on "
            "the line above if they are not measurements"
        )
    return problems


def problems_of(doc: Path, repo: Path) -> list[str]:
    """The problems of every prose paragraph of ``doc``."""
    return [
        problem
        for paragraph in paragraphs(doc.read_text(encoding="utf-8"))
        for problem in paragraph_problems(paragraph, repo)
    ]


# --- the docs ------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_measured_figure_in_the_prose_of_every_doc_names_its_document(doc):
    assert problems_of(doc, REPO) == []


def test_the_docs_prose_holds_figures_to_check():
    text = PERFORMANCE.read_text(encoding="utf-8")
    backed = [p for p in paragraphs(text) if measured_figures(p) and FILE_PATTERN.search(p.text)]
    assert len(backed) >= 10


# --- the check fails where it should -------------------------------------------------------


def _doc(tmp_path: Path, text: str) -> Path:
    doc = tmp_path / "docs" / "page.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(text, encoding="utf-8")
    return doc


def _performance_copy(tmp_path: Path) -> tuple[Path, list[str]]:
    """docs/performance.md, benchmarks/results/ and weights/ copied under ``tmp_path``; the
    copy and its lines."""
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "performance.md"
    shutil.copy(PERFORMANCE, doc)
    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    shutil.copytree(REPO / "weights", tmp_path / "weights", ignore=shutil.ignore_patterns("*.pt"))
    return doc, doc.read_text(encoding="utf-8").splitlines()


def test_a_bare_measured_figure_put_into_a_copy_of_a_doc_is_caught(tmp_path):
    doc, lines = _performance_copy(tmp_path)
    assert problems_of(doc, tmp_path) == []
    heading = next(n for n, line in enumerate(lines) if line.startswith("## Results"))
    lines[heading + 1 : heading + 1] = ["", "The MLP spec trains at 31.2 samples/s here.", ""]
    doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (problem,) = problems_of(doc, tmp_path)
    assert problem.startswith(f"paragraph at line {heading + 3} holds measured figures")
    assert "'31.2 samples/s'" in problem


def test_a_list_item_needs_its_own_document_even_beside_one_that_names_it(tmp_path):
    name = "benchmarks/results/learning-quickstart-2026-11-24.json"
    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    backed = f"- **Fast.** 46.2 s to 95% (`{name}`).\n"
    assert problems_of(_doc(tmp_path, backed), tmp_path) == []
    bare = backed + "- **Small.** The process peaks at 1.2 GiB.\n"
    (problem,) = problems_of(_doc(tmp_path, bare), tmp_path)
    assert problem.startswith("paragraph at line 2 holds measured figures ('1.2 GiB')")


def test_a_named_document_that_does_not_exist_fails(tmp_path):
    text = "Trains at 31.2 samples/s (`benchmarks/results/lost.json`).\n"
    assert problems_of(_doc(tmp_path, text), tmp_path) == [
        "paragraph at line 1 names benchmarks/results/lost.json, which does not exist"
    ]


@pytest.mark.parametrize(
    "sentence",
    [
        "A step takes 1.4 s.",
        "It held 12% of the step.",
        "The copy ran at 26 GiB/s.",
        "Compiling took 15 minutes.",
        "A sample costs 42.7 GFLOP.",
        "It reads 3,500 rows/s.",
        "The run wrote 512 bytes.",
    ],
)
def test_every_unit_of_measure_in_prose_is_caught(tmp_path, sentence):
    (problem,) = problems_of(_doc(tmp_path, f"# Page\n\n{sentence}\n"), tmp_path)
    assert problem.startswith("paragraph at line 3 holds measured figures")


@pytest.mark.parametrize(
    "text",
    [
        "Run `trm run quickstart --max-time 30m`.",
        "A 9×9 Sudoku on 4 × H100, 2 processes × 1 thread, 800 steps.",
        "```\nsamples/s 31.2   step 1.4 s\n```",
        "| spec | samples/s |\n|---|---|\n| a | 12 |",
    ],
)
def test_numbers_without_a_unit_code_and_tables_are_not_prose_figures(tmp_path, text):
    assert problems_of(_doc(tmp_path, text + "\n"), tmp_path) == []


def test_a_marked_paragraph_passes_unless_it_says_measured(tmp_path):
    marker = "<!-- not measured: the paper's published figure (arXiv:2510.04871) -->\n"
    cited = "The paper reports 87.4% on Sudoku-Extreme.\n"
    assert problems_of(_doc(tmp_path, marker + cited), tmp_path) == []
    claimed = "We measured 87.4% on Sudoku-Extreme.\n"
    (problem,) = problems_of(_doc(tmp_path, marker + claimed), tmp_path)
    assert problem.startswith("paragraph at line 2 is marked 'not measured' but says measured")


def test_a_marker_must_say_why_and_sit_right_above(tmp_path):
    empty = "<!-- not measured:  -->\nThe paper reports 87.4%.\n"
    (problem,) = problems_of(_doc(tmp_path, empty), tmp_path)
    assert "names no results document" in problem
    apart = "<!-- not measured: a paper's figure -->\n\nThe paper reports 87.4%.\n"
    (problem,) = problems_of(_doc(tmp_path, apart), tmp_path)
    assert "names no results document" in problem


def test_prose_that_says_not_recorded_fails(tmp_path):
    text = "The eager loop was slower (not recorded).\n"
    assert problems_of(_doc(tmp_path, text), tmp_path) == [
        "paragraph at line 1 says 'not recorded': name the figure's results document, or "
        "remove the figure and say that it is not measured"
    ]


def test_list_items_and_continuations_make_paragraphs_headings_and_code_do_not():
    text = (
        "# Title 1\nIntro at step\n400. still intro.\n\n- one\n  more of one\n- two\n\n"
        "1. three\n2. four\n\nText.\n\n    code 2 s\n"
    )
    assert [(p.line, p.text) for p in paragraphs(text)] == [
        (2, "Intro at step 400. still intro."),
        (5, "- one more of one"),
        (7, "- two"),
        (9, "1. three"),
        (10, "2. four"),
        (12, "Text."),
    ]
