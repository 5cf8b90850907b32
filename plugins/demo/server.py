"""The served page of ``trm demo``: the standard library's ThreadingHTTPServer.

Routes: ``GET /`` the page (page/index.html), ``GET /NAME`` the page's own files (page/),
``GET /trm-demo.json`` the model's card (:func:`~trm.plugins.demo.session.page_card`),
``POST /api/solve`` a puzzle, answered as newline-delimited JSON (``application/x-ndjson``):
one event a line, written as each supervision step is computed, so the page shows the steps
as they come. A request or puzzle the model cannot take is answered 400 with one event
``{"kind": "error", "message": ...}`` (the ``trm: error:`` text, never a traceback); a failure
while solving ends the stream with such an event.

HTTP/1.0 framing (one request a connection, the body ends when the connection closes) keeps
the streaming plain: no chunked encoding to write, and every browser reads it.
"""

from __future__ import annotations

import json
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from trm.errors import TrmError
from trm.plugins.demo.session import MAX_PUZZLE_CHARS, PageSolver

# The content type of each file of the page, by suffix.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
    ".wasm": "application/wasm",
    ".onnx": "application/octet-stream",
}
# The largest request body read, in bytes (a puzzle and its JSON quoting).
MAX_BODY_BYTES = 8 * MAX_PUZZLE_CHARS


def page_dir() -> Path:
    """The folder of the page's files (package data)."""
    return Path(str(resources.files("trm.plugins.demo") / "page"))


class DemoServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer serving the page and ``solver``'s answers; ``url`` is where."""

    daemon_threads = True

    def __init__(self, solver: PageSolver, host: str, port: int) -> None:
        self.solver = solver
        self.page = page_dir()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: DemoServer
    server_version = "trm-demo"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/trm-demo.json":
            self._send(HTTPStatus.OK, ".json", json.dumps(self.server.solver.card).encode())
            return
        name = "index.html" if path == "/" else path.lstrip("/")
        file = self.server.page / name
        if "/" in name or name.startswith(".") or not file.is_file():
            self._send(HTTPStatus.NOT_FOUND, ".html", b"<p>not found</p>")
            return
        self._send(HTTPStatus.OK, file.suffix, file.read_bytes())

    def do_POST(self) -> None:
        if self.path != "/api/solve":
            self._error(HTTPStatus.NOT_FOUND, f"no such address: {self.path}")
            return
        try:
            events = self.server.solver.solve_events(self._request())
        except TrmError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            for event in events:
                self._line(event)
        except (BrokenPipeError, ConnectionResetError):
            return  # the page went away
        except Exception as exc:  # the page shows a message, never a traceback
            message = str(exc) if isinstance(exc, TrmError) else f"the model failed: {exc!r}"
            print(f"trm demo: {message}", file=sys.stderr)
            self._line({"kind": "error", "message": message})

    def _request(self) -> Any:
        """The JSON body; TrmError when it is missing, too large or not JSON."""
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise TrmError("the request has no Content-Length; send the puzzle as JSON") from None
        if not 0 < length <= MAX_BODY_BYTES:
            raise TrmError(f"the request has {length} bytes; send 1 to {MAX_BODY_BYTES}")
        body = self.rfile.read(length)
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise TrmError('the request is not JSON {"puzzle": TEXT, "explore": N}') from None

    def _line(self, event: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(event).encode() + b"\n")
        self.wfile.flush()

    def _error(self, status: HTTPStatus, message: str) -> None:
        body = json.dumps({"kind": "error", "message": message}).encode()
        self._send(status, ".json", body)

    def _send(self, status: HTTPStatus, suffix: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPES.get(suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the page's requests are not news on the terminal."""
