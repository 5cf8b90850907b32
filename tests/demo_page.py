"""Helpers of the demo page's tests: serving a folder as static hosting would, a served
``trm demo`` page in a thread, and solving one puzzle on an open page."""

from __future__ import annotations

import contextlib
import functools
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
# How long a page may take to load its solver (onnxruntime-web builds the session of an
# unrolled graph on one thread: over a minute on a shared 2-core machine).
LOAD_TIMEOUT_MS = 300_000
SOLVE_TIMEOUT_MS = 120_000


def browser_missing() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        return "no Chromium at /usr/bin/chromium (apt-get install chromium)"
    return None


def chromium_path() -> str:
    return str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """``server`` answering on a thread; its URL."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}/"
    finally:
        server.shutdown()
        server.server_close()


def static_server(folder: Path) -> ThreadingHTTPServer:
    """A plain static file server of ``folder`` on a free port of 127.0.0.1."""
    handler = functools.partial(_QuietFiles, directory=str(folder))
    return ThreadingHTTPServer(("127.0.0.1", 0), handler)


def open_page(browser: Any, url: str, requests: list[str] | None = None) -> Any:
    """A new tab on the page (steps shown without delay), once its solver is ready; every
    URL the tab requests is appended to ``requests`` when given."""
    page = browser.new_page()
    if requests is not None:
        page.on("request", lambda request: requests.append(request.url))
    page.goto(url + "?delay=0")
    page.wait_for_selector('#status[data-state="ready"]', state="attached", timeout=LOAD_TIMEOUT_MS)
    return page


def solve_on_page(page: Any, puzzle: str) -> dict[str, Any]:
    """Paste ``puzzle``, then :func:`press_solve`."""
    page.fill("#paste", puzzle)
    return press_solve(page)


def draw_maze(page: Any, maze: str) -> None:
    """Draw ``maze`` (lines of ``#``, space, ``S``, ``G``) on the page's empty maze editor as a
    person would: choose a tool, click each of its cells."""
    rows = maze.split("\n")
    cols = len(rows[0])
    for char, tool in (("#", "wall"), ("S", "start"), ("G", "goal")):
        page.get_by_label(tool, exact=True).check()
        for r, line in enumerate(rows):
            for c, cell in enumerate(line):
                if cell == char:
                    page.click(f'#editor .grid [data-index="{r * cols + c}"]')


def press_solve(page: Any) -> dict[str, Any]:
    """Press solve on the puzzle entered, wait for the end: the answer's cells, the steps
    shown, the last step's verdict, the status line and the graph's run time (ms; the static
    page only)."""
    page.click("#solve")
    page.wait_for_selector(
        '#status[data-state="done"], #status[data-state="error"]',
        state="attached",
        timeout=SOLVE_TIMEOUT_MS,
    )
    solve_ms = page.get_attribute("#status", "data-solve-ms")
    return {
        "state": page.get_attribute("#status", "data-state"),
        "cells": page.get_attribute("#answer", "data-cells"),
        "steps": page.locator("#steps tbody tr").count(),
        "message": page.inner_text("#message"),
        "verdict": page.get_attribute("#verdict", "class"),
        "status": page.inner_text("#status"),
        "solve_ms": float(solve_ms) if solve_ms else None,
    }
