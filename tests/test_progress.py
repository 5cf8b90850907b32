"""The progress plugin's line: a rich progress bar with the ETA on a terminal, cut to the
terminal's width; plain lines without a bar when the output is not a terminal."""

from __future__ import annotations

import os
import re

from trm.plugins.operations import progress

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LINE = "step 200/800  720 samples/s  loss 0.1234  eval exact 99.0%  ETA 1m02s"


def _show(monkeypatch, capsys, tty: bool, columns: int, colour: str | None) -> str:
    display = progress.Progress()
    display.tty, display.color_system = tty, colour
    size = os.terminal_size((columns, 24))
    monkeypatch.setattr(progress.shutil, "get_terminal_size", lambda *_: size)
    display.show(LINE, 0.25)
    return capsys.readouterr().out


def test_a_terminal_line_starts_with_a_bar_and_keeps_the_eta(monkeypatch, capsys):
    written = _show(monkeypatch, capsys, tty=True, columns=120, colour="truecolor")
    assert written.startswith("\r\033[K") and "\n" not in written
    visible = ANSI.sub("", written.removeprefix("\r\033[K"))
    bar, text = visible[: visible.index(" step")], visible[visible.index("step") :]
    assert text == LINE and len(visible) <= 119
    assert set(bar) <= {"━", "╸", "╺"} and len(bar) == progress.BAR_MAX_CHARS
    assert "\x1b[" in written  # coloured: done and to-do parts differ


def test_without_colour_the_bar_is_plain_text_and_shows_the_fraction(monkeypatch, capsys):
    written = _show(monkeypatch, capsys, tty=True, columns=120, colour=None)
    bar = written.removeprefix("\r\033[K").split(" ")[0]
    assert bar == "[" + "#" * 7 + "-" * 21 + "]"  # a quarter of 28 cells


def test_a_narrow_terminal_drops_the_bar_before_the_line(monkeypatch, capsys):
    written = _show(monkeypatch, capsys, tty=True, columns=70, colour="truecolor")
    assert written == "\r\033[K" + LINE[:69]


def test_not_a_terminal_prints_plain_lines_without_a_bar(monkeypatch, capsys):
    assert _show(monkeypatch, capsys, tty=False, columns=120, colour="truecolor") == LINE + "\n"
