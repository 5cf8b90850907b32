"""The static demo page solving puzzles in a browser: time per puzzle, answers beside trm solve's.

Usage:
  python benchmarks/browser_solve.py [MODEL] [--puzzles N] [--seed S] [--out FILE] [--json]

Writes ``trm demo --static`` of MODEL (default sudoku9-laptop) into a temporary folder, serves
it with a plain static file server (as static hosting would), opens it in headless Chromium
(Playwright, /usr/bin/chromium) and solves N fresh puzzles — the sudoku task's generator with
the options of the model's first manifest kind and seed S (no training or manifest used it:
they used 0 and 1) — one at a time on the page: paste, press solve, wait for the answer.
Records the seconds the page took to load its solver (onnxruntime-web building the session
of model.onnx), per puzzle the milliseconds of the graph's run (``session.run``, as the page
measures it) and of the whole solve on the page (press to answer shown, no step delay), and
counts the answers equal to ``trm solve``'s (:meth:`trm.Model.solve`).

``--out FILE`` writes the document (with benchmarks/provenance.py's block); prints a table,
or with ``--json`` the document.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from provenance import provenance
from tables import print_rows

import trm
from trm.plugin_manager import load_plugins
from trm.plugins.demo.static import write_static
from trm.plugins.demo.vendor import read_lock
from trm.plugins.tasks.sudoku.generator import generate_many
from trm.shipped import shipped_manifest

DEFAULT_MODEL = "sudoku9-laptop"
DEFAULT_SEED = 47
CHROMIUM = "/usr/bin/chromium"
LOAD_TIMEOUT_MS = 600_000
SOLVE_TIMEOUT_MS = 120_000


def fresh_puzzles(name: str, count: int, seed: int) -> list[str]:
    """``count`` puzzles of the kind the shipped model's manifest lists first, from ``seed``."""
    options = shipped_manifest(name).kinds[0].options
    questions, _ = generate_many(
        count,
        int(options["size"]),
        int(options["clues"]),
        seed=seed,
        workers=1,
        min_clues=int(options.get("min_clues", 0)),
        minimal=float(options.get("minimal", 0.0)),
    )
    return ["".join(str(d) if d else "." for d in q.ravel()) for q in questions]


class _Files(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def measure(name: str, count: int, seed: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    model = trm.load(name)
    puzzles = fresh_puzzles(name, count, seed)
    expected = [model.solve(p).answer_cells for p in puzzles]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        page_folder = write_static(model, name, Path(tmp) / "site", load_plugins(())).folder
        write_s = time.perf_counter() - started
        files = {p.name: p.stat().st_size for p in page_folder.rglob("*") if p.is_file()}
        server = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(_Files, directory=str(page_folder))
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/?delay=0"
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM)
                page = browser.new_page()
                started = time.perf_counter()
                page.goto(url)
                page.wait_for_selector(
                    '#status[data-state="ready"]', state="attached", timeout=LOAD_TIMEOUT_MS
                )
                load_s = time.perf_counter() - started
                rows = []
                for puzzle, want in zip(puzzles, expected, strict=True):
                    page.fill("#paste", puzzle)
                    started = time.perf_counter()
                    page.click("#solve")
                    page.wait_for_selector(
                        '#status[data-state="done"]', state="attached", timeout=SOLVE_TIMEOUT_MS
                    )
                    wall_ms = (time.perf_counter() - started) * 1000
                    cells = page.get_attribute("#answer", "data-cells")
                    rows.append(
                        {
                            "puzzle": puzzle,
                            "graph_ms": float(page.get_attribute("#status", "data-solve-ms")),
                            "page_ms": round(wall_ms, 1),
                            "equal_to_trm_solve": cells == want,
                        }
                    )
                chromium = browser.version
                browser.close()
        finally:
            server.shutdown()
            server.server_close()
    lock = read_lock()
    graph = [r["graph_ms"] for r in rows]
    on_page = [r["page_ms"] for r in rows]
    return {
        "model": name,
        "puzzles": count,
        "seed": seed,
        "equal_to_trm_solve": sum(r["equal_to_trm_solve"] for r in rows),
        "page_load_s": round(load_s, 2),
        "static_write_s": round(write_s, 2),
        "graph_ms_median": round(statistics.median(graph), 1),
        "graph_ms_mean": round(statistics.fmean(graph), 1),
        "page_ms_median": round(statistics.median(on_page), 1),
        "page_ms_mean": round(statistics.fmean(on_page), 1),
        "page_bytes": files,
        "browser": f"headless Chromium {chromium} (Debian), Playwright",
        "onnxruntime_web": lock["version"],
        "threads": 1,
        "rows": rows,
        "provenance": provenance(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="a shipped model's name")
    parser.add_argument("--puzzles", type=int, default=20, help="fresh puzzles")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="their seed")
    parser.add_argument("--out", type=Path, help="write the document here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    document = measure(args.model, args.puzzles, args.seed)
    if args.out is not None:
        args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print_rows(
        ["model", "equal to trm solve", "page load s", "graph ms/puzzle", "page ms/puzzle"],
        [
            [
                document["model"],
                f"{document['equal_to_trm_solve']}/{document['puzzles']}",
                f"{document['page_load_s']:.1f}",
                f"{document['graph_ms_median']:.0f} (median)",
                f"{document['page_ms_median']:.0f} (median)",
            ]
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
