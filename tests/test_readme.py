"""README.md shows a newcomer everything: every command of ``trm --help`` in its command
table (one row each), every data source's build, and every page of docs/ in its list; and
every option a row shows is one the command takes. Read from the parser and the folder, so a
new command or page without its README line fails here."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from trm.cli.main import build_parser
from trm.plan.dataset import data_sources
from trm.plugin_manager import load_plugins

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _command_rows() -> list[str]:
    """The first cells of the Commands table, without their backticks."""
    rows = []
    for line in _section("Commands").splitlines():
        match = re.match(r"\| `([^`]+)` \|", line)
        if match:
            rows.append(match.group(1).replace("\\|", "|"))
    return rows


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_of_trm_help_has_a_row():
    commands = _subcommands(build_parser())
    rows = _command_rows()
    missing = [name for name in commands if not any(r.startswith(f"trm {name}") for r in rows)]
    assert not missing, f"README.md's command table lacks: {missing}"


def test_every_data_source_has_its_build_row():
    rows = _command_rows()
    sources = sorted(data_sources(load_plugins()))
    missing = [s for s in sources if not any(r.startswith(f"trm data build {s} ") for r in rows)]
    assert not missing, f"README.md's command table lacks trm data build {missing}"


@pytest.mark.parametrize("shown", ["trm eval CHECKPOINT --submission", "torchrun "])
def test_the_table_shows_submissions_and_torchrun(shown):
    assert any(row.startswith(shown) for row in _command_rows())


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_every_option_a_row_shows_is_one_the_command_takes():
    from trm.plugins.datasets.data_cmd import _options_parser

    commands = _subcommands(build_parser())
    sources = data_sources(load_plugins())
    for row in _command_rows():
        words = row.split()
        if words[0] == "torchrun":
            words = ["trm", *words[words.index("trm") + 1 :]]
        name = words[1]
        parser = commands[name]
        if name == "data" and words[3] in sources:
            parser = _options_parser(sources[words[3]])
        flags = set(re.findall(r"(--[a-z][a-z-]*)", " ".join(words)))
        unknown = flags - _options(parser) - {"--help"}
        assert not unknown, f"README row `{row}` shows options trm {name} does not take: {unknown}"


def test_every_page_of_docs_is_listed():
    listed = set(re.findall(r"\]\(docs/([a-z0-9_-]+\.md)\)", _section("Documentation")))
    pages = {page.name for page in (ROOT / "docs").glob("*.md")}
    assert pages - listed == set(), f"README.md's documentation list lacks {pages - listed}"
    assert listed - pages == set(), f"README.md lists missing pages {listed - pages}"


def _python_example() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


@pytest.mark.slow
def test_the_python_example_runs_as_a_script_without_a_main_guard(tmp_path):
    """The README's Python example saved as train.py, as shown (no ``if __name__ ==
    "__main__":`` guard), and run with ``python``: it trains and exits. The data build runs
    in two worker processes, which must not run the script again (multiprocessing's spawn
    did: each worker trained anew, the run's lock refused it, and the pool restarted it
    forever). Shortened to a few steps and a small dataset through the call's arguments."""
    import os
    import signal
    import subprocess
    import sys

    example = _python_example()
    assert "__main__" not in example
    call = 'trm.train("quickstart")'
    assert call in example, "the README's example no longer trains the quickstart"
    quick = [
        "data.generate.count=256",
        "data.generate.test_count=32",
        "data.generate.workers=2",
        "runtime.device=cpu",
        "runtime.precision=fp32",
        "runtime.threads=1",
        "runtime.compile=off",
    ]
    script = tmp_path / "train.py"
    script.write_text(
        example.replace(call, f'trm.train("quickstart", max_steps=2, overrides={quick!r})')
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the script did not finish in 150 s; its output ended:\n{out[-2000:]}")
    assert proc.returncode == 0, out[-2000:]
    assert "in use by another trm run" not in out
    assert (tmp_path / "runs" / "quickstart" / "summary.json").exists()
