"""Draw docs/images/demo-mid-solve.png: the ``trm demo`` page half way through a solve.

    python scripts/demo_screenshot.py [--out docs/images/demo-mid-solve.png]

Serves the shipped 9x9 model's page on a free port, pastes a fresh puzzle (seed 47 of the
sudoku task's generator, carved minimal) on which the model revises its answer for seven
steps, and takes the picture while the fourth step is shown. Needs Playwright and Chromium
(/usr/bin/chromium).
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import trm
from trm.plugins.demo.server import DemoServer
from trm.plugins.demo.session import PageSolver

MODEL = "sudoku9-laptop"
PUZZLE = ".1.9..8.5...2.....548.....2....31...8......2.....7.5...84.15...7.5329..4..1...3.."
SHOWN_STEPS = 4
STEP_DELAY_MS = 1500


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images/demo-mid-solve.png"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    server = DemoServer(PageSolver(trm.load(MODEL), MODEL), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page(viewport={"width": 1100, "height": 860})
            page.goto(f"{server.url}?delay={STEP_DELAY_MS}")
            page.wait_for_selector('#status[data-state="ready"]', state="attached")
            page.fill("#paste", PUZZLE)
            page.click("#solve")
            page.wait_for_function(
                f"document.querySelectorAll('#steps tbody tr').length >= {SHOWN_STEPS}"
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out), full_page=True)
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
