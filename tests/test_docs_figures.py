"""Every results table in docs/performance.md (and the user guide's table of shipped models)
names the JSON document its figures come from, and each number of the table is one of that
document's values (as the table rounds it).

A *results table* is a Markdown table with a number in a body cell (code spans aside). Within
the 3 lines above it a line names its file as ``benchmarks/results/<file>.json`` (or a shipped
manifest, ``weights/<name>.json``). A cell may say ``not recorded``: the figure's document was
lost and the cell holds no number until it is measured again.

A number of the table matches a value of the document when the value, rounded to the decimals
the table shows, is the number: ``6,195`` matches ``6195.3``, ``14.4%`` matches ``0.144`` (a
percentage may stand for a fraction), ``0.98`` under a ``GiB`` heading matches a byte count.
Numbers inside the document's strings (a row's label, ``"maze b8/24"``) count as values.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from attrs import define

REPO = Path(__file__).resolve().parent.parent
PERFORMANCE = REPO / "docs" / "performance.md"
# How far above a table the line naming its file may be.
FILE_LINE_REACH = 3
FILE_PATTERN = re.compile(r"(?:benchmarks/results|weights)/[\w.-]+\.json")
# A number standing alone: not part of a word (bf16, AVX-512, sm_90) or of a longer number.
NUMBER_PATTERN = re.compile(r"(?<![\w.\-−+/])([-+−]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")
CODE_SPAN = re.compile(r"`[^`]*`")
NOT_RECORDED = "not recorded"
# Units a heading or a cell may name, with the factors that turn a document's value into them.
UNIT_SCALES = {
    "GiB": (1 / 2**30, 1 / 1e9),
    "MiB": (1 / 2**20, 1 / 1e6),
    "KiB": (1 / 2**10, 1 / 1e3),
    "GFLOP": (1 / 1e9,),
    "TFLOP": (1 / 1e12,),
    "ms": (1e3,),
}


@define(frozen=True)
class Table:
    """A Markdown table of a document: its first line's number (1-based), its heading cells,
    its body rows' cells, and the lines above it."""

    line: int
    heading: list[str]
    rows: list[list[str]]
    above: list[str]


@define(frozen=True)
class Figure:
    """A number as a table shows it: its value, its decimals, whether it is a percentage, and
    the units its cell and column name."""

    text: str
    value: float
    decimals: int
    percent: bool
    units: tuple[str, ...]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """The Markdown tables of ``text`` (a heading line, a ``|---|`` line, body lines)."""
    lines = text.splitlines()
    found = []
    index = 0
    while index < len(lines) - 1:
        first, second = lines[index].strip(), lines[index + 1].strip()
        if first.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", second):
            end = index + 2
            while end < len(lines) and lines[end].strip().startswith("|"):
                end += 1
            found.append(
                Table(
                    line=index + 1,
                    heading=_cells(first),
                    rows=[_cells(line) for line in lines[index + 2 : end]],
                    above=lines[max(0, index - FILE_LINE_REACH) : index],
                )
            )
            index = end
        else:
            index += 1
    return found


def figures_of(cell: str, heading: str) -> list[Figure]:
    """The numbers a cell shows (code spans left out), with the units cell and heading name."""
    plain = CODE_SPAN.sub(" ", cell)
    units = tuple(unit for unit in UNIT_SCALES if unit in plain or unit in heading)
    found = []
    for match in NUMBER_PATTERN.finditer(plain):
        sign, whole, fraction = match.groups()
        before = plain[match.start() - 1] if match.start() > 0 else " "
        if sign and not (before.isspace() or before in "(["):
            sign = ""  # a dash between figures ("48.8%-49.4%"), not a minus
        rest = plain[match.end() :].lstrip()
        value = float(whole.replace(",", "") + (fraction or ""))
        found.append(
            Figure(
                text=match.group(0),
                value=-value if sign in ("-", "−") else value,
                decimals=len(fraction) - 1 if fraction else 0,
                percent=rest.startswith("%"),
                units=units,
            )
        )
    return found


def results_tables(text: str) -> list[Table]:
    """The tables of ``text`` with a number in a body cell."""
    return [
        table
        for table in tables(text)
        if any(
            figures_of(cell, heading)
            for row in table.rows
            for cell, heading in zip(row, table.heading, strict=False)
        )
    ]


def named_files(table: Table) -> list[str]:
    """The ``benchmarks/results/….json`` (and ``weights/….json``) files named within the lines
    above the table, in order; a table of two documents names both."""
    return [name for line in table.above for name in FILE_PATTERN.findall(line)]


def document_values(document: object) -> list[float]:
    """Every number of a JSON document: its numbers, the numbers written in its strings, and
    the differences between two numbers of the same ``…_bytes`` key (a table's "saved" column
    is one row's ``peak_rss_bytes`` less another's)."""
    values: list[float] = []
    by_key: dict[str, list[float]] = {}
    stack: list[tuple[str, object]] = [("", document)]
    while stack:
        key, item = stack.pop()
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, int | float):
            if math.isfinite(item):
                values.append(float(item))
                by_key.setdefault(key, []).append(float(item))
        elif isinstance(item, str):
            values.extend(figure.value for figure in figures_of(item, ""))
        elif isinstance(item, dict):
            stack.extend((str(k), v) for k, v in item.items())
            stack.extend(("", k) for k in item)
        elif isinstance(item, list):
            stack.extend((key, v) for v in item)
    for key, same in by_key.items():
        if not key.endswith("_bytes"):
            continue
        values.extend(a - b for a in same for b in same if a != b)
    return values


def shows(figure: Figure, value: float) -> bool:
    """True when ``value``, rounded as the table rounds ``figure``, is ``figure``."""
    half_step = 0.5 * 10 ** (-figure.decimals) * (1 + 1e-9) + 1e-12
    candidates = [value]
    if figure.percent:
        candidates.append(value * 100)
    for unit in figure.units:
        candidates.extend(value * scale for scale in UNIT_SCALES[unit])
    return any(abs(candidate - figure.value) <= half_step for candidate in candidates)


def table_problems(table: Table, repo: Path) -> list[str]:
    """What is wrong with a results table: it names no file, the file is missing, or a number
    of a cell is none of the file's values. Empty when nothing is."""
    where = f"table at line {table.line}"
    names = named_files(table)
    if not names:
        return [
            f"{where} names no file: put `benchmarks/results/<file>.json` on a line within "
            f"the {FILE_LINE_REACH} lines above it, or mark its cells '{NOT_RECORDED}'"
        ]
    missing = [name for name in names if not (repo / name).is_file()]
    if missing:
        return [f"{where} names {name}, which does not exist" for name in missing]
    values = [
        value
        for name in names
        for value in document_values(json.loads((repo / name).read_text(encoding="utf-8")))
    ]
    name = " and ".join(names)
    problems = []
    for row in table.rows:
        for cell, heading in zip(row, table.heading, strict=False):
            for figure in figures_of(cell, heading):
                if not any(shows(figure, value) for value in values):
                    problems.append(
                        f"{where}: {figure.text!r} (column {heading!r}, row {row[0]!r}) "
                        f"is not a value of {name}"
                    )
    return problems


def problems_of(doc: Path, repo: Path) -> list[str]:
    """The problems of every results table of ``doc``."""
    return [
        problem
        for table in results_tables(doc.read_text(encoding="utf-8"))
        for problem in table_problems(table, repo)
    ]


# --- the docs ------------------------------------------------------------------------------


def test_every_results_table_of_performance_md_names_its_file_and_its_numbers_are_in_it():
    assert problems_of(PERFORMANCE, REPO) == []


def test_the_shipped_models_figures_in_the_user_guide_are_their_manifests():
    guide = REPO / "docs" / "user-guide.md"
    (table,) = [
        t for t in results_tables(guide.read_text(encoding="utf-8")) if "solves" in t.heading
    ]
    assert named_files(table) == ["weights/quickstart.json", "weights/sudoku9-laptop.json"]
    assert problems_of(guide, REPO) == []


# Documents whose every results table is checked like performance.md's; docs/contrib.md and
# docs/hardware.md hold tables of means and bands the check cannot match yet (see CHANGELOG).
CHECKED_DOCS = ("performance.md", "user-guide.md", "sweeps.md")


@pytest.mark.parametrize("name", CHECKED_DOCS)
def test_every_results_table_of_the_checked_docs_names_its_file_and_its_numbers_are_in_it(name):
    assert problems_of(REPO / "docs" / name, REPO) == []


def test_the_recipe_runs_and_memory_accuracy_tables_show_their_documents_values():
    """The tables of docs/contrib.md's recipe runs and docs/hardware.md's memory-accuracy
    measurements (each names its documents above it) hold only their documents' values."""
    checked = {
        "contrib.md": ["recipe", "machine", "steps"],
        "hardware.md": ["row", "precision", "predicted MiB"],
    }
    for name, heading in checked.items():
        doc = REPO / "docs" / name
        text = doc.read_text(encoding="utf-8")
        (table,) = [t for t in results_tables(text) if t.heading[:3] == heading]
        assert named_files(table), f"{name}: the table at line {table.line} names no document"
        assert table_problems(table, REPO) == [], name


def test_performance_md_has_results_tables_to_check():
    assert len(results_tables(PERFORMANCE.read_text(encoding="utf-8"))) >= 5


# --- the check fails where it should -------------------------------------------------------


def _copy_repo_part(tmp_path: Path) -> Path:
    """docs/performance.md and benchmarks/results/ copied under ``tmp_path``."""
    (tmp_path / "docs").mkdir()
    shutil.copy(PERFORMANCE, tmp_path / "docs" / "performance.md")
    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    return tmp_path / "docs" / "performance.md"


def test_a_table_whose_file_reference_is_dropped_fails(tmp_path):
    doc = _copy_repo_part(tmp_path)
    text = doc.read_text(encoding="utf-8")
    first = results_tables(text)[0]
    lines = text.splitlines()
    for offset in range(first.line - 1 - FILE_LINE_REACH, first.line - 1):
        lines[offset] = FILE_PATTERN.sub("the saved document", lines[offset])
    doc.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems = problems_of(doc, tmp_path)
    assert any(f"table at line {first.line} names no file" in p for p in problems), problems


def test_a_table_whose_file_is_removed_fails(tmp_path):
    doc = _copy_repo_part(tmp_path)
    first = results_tables(doc.read_text(encoding="utf-8"))[0]
    (name,) = named_files(first)
    (tmp_path / name).unlink()
    problems = problems_of(doc, tmp_path)
    assert f"table at line {first.line} names {name}, which does not exist" in problems


def test_a_number_changed_in_a_table_fails(tmp_path):
    doc = _copy_repo_part(tmp_path)
    doc.write_text(
        "Saved as `benchmarks/results/learning-quickstart-2026-11-24.json`:\n\n"
        "| seed | training s to ≥ 95% |\n|---|---|\n| 0 | 46.2 |\n| 1 | 47.9 |\n",
        encoding="utf-8",
    )
    assert problems_of(doc, tmp_path) == [
        "table at line 3: '47.9' (column 'training s to ≥ 95%', row '1') is not a value of "
        "benchmarks/results/learning-quickstart-2026-11-24.json"
    ]


def test_a_table_with_no_numbers_needs_no_file(tmp_path):
    text = "| stage | figures |\n|---|---|\n| bench | not recorded |\n| `bf16` AVX-512 | ok |\n"
    assert results_tables(text) == []


@pytest.mark.parametrize(
    ("cell", "heading", "value", "matches"),
    [
        ("6,195", "samples/s", 6195.3, True),
        ("6,195", "samples/s", 6196.0, False),
        ("14.4%", "exact", 0.144, True),
        ("14.4%", "exact", 0.145, False),
        ("14.4%", "exact", 14.4, True),
        ("0.361", "MFU", 0.36068836, True),
        ("0.361", "MFU", 0.3616, False),
        ("-0.6%", "error", -0.006, True),
        ("-0.6%", "error", 0.006, False),
        ("48.8%-49.4%", "min-max", 0.488, True),
        ("0.98", "peak RSS GiB", 0.98 * 2**30, True),
        ("0.98", "peak RSS", 0.98 * 2**30, False),
        ("272 MiB (27%)", "peak saved", 272.4 * 2**20, True),
    ],
)
def test_a_figure_matches_a_value_only_as_the_table_rounds_it(cell, heading, value, matches):
    figure = figures_of(cell, heading)[0]
    assert shows(figure, value) is matches


def test_a_dash_between_two_figures_is_not_a_minus():
    assert [f.value for f in figures_of("48.8%-49.4%", "min-max")] == [48.8, 49.4]
    assert [f.value for f in figures_of("from -0.6% to +2.0%", "")] == [-0.6, 2.0]
    assert [f.value for f in figures_of("first (−12.5%)", "")] == [-12.5]
