"""``trm demo [MODEL]``: a local page where a person enters a puzzle and watches the model
solve it step by step; ``trm demo --static DIR [MODEL]``: the same page as a folder for
static hosting, running the model's ONNX solver in the browser.

MODEL is a shipped model's name (default ``sudoku9-laptop``), a run directory, a checkpoint
file or a model folder ``trm export --format hf`` wrote, loaded with :func:`trm.load`'s
loader. The page binds to 127.0.0.1 unless ``--host`` says otherwise; ``--port 0`` takes a
free port. The URL is printed on stdout; no browser is opened.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trm.cli.output import info

if TYPE_CHECKING:
    from trm.api.model import Model
    from trm.plugins.demo.server import DemoServer

DEFAULT_MODEL = "sudoku9-laptop"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "demo",
        parents=[common],
        help="a page that solves your puzzle step by step (--static: in the browser)",
    )
    parser.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_MODEL,
        help="a shipped model's name (default: %(default)s), a run directory, a checkpoint "
        "file or a model folder (trm export --format hf)",
    )
    parser.add_argument(
        "--host", type=_host, default=DEFAULT_HOST, help="address to bind (default %(default)s)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help="port to listen on (default %(default)s; 0: a free one)",
    )
    parser.add_argument(
        "--static",
        type=_folder,
        metavar="DIR",
        help="write the page, the model's ONNX solver and onnxruntime-web into the new folder "
        "DIR for static hosting, instead of serving",
    )
    parser.set_defaults(func=run)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 (a free port) to 65535, got {value}")
    return value


def _host(text: str) -> str:
    if not text.strip() or any(ch.isspace() for ch in text):
        raise argparse.ArgumentTypeError(f"expected an address such as 127.0.0.1, got {text!r}")
    return text


def _folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a new folder for the page")
    return Path(text).expanduser()


def page_model(model: str, plugins: Sequence[str]) -> tuple[Model, str]:
    """The model MODEL names (a shipped model's name, a run directory, a checkpoint file or
    an exported model folder, as :func:`trm.load` reads them) and the name the page shows:
    the shipped model's, else MODEL as given. TrmError, before anything is served or
    written, for a model that does not load or whose task the page cannot show."""
    from trm.api.model import load_model
    from trm.plugins.demo.session import page_card

    loaded = load_model(Path(model), tuple(plugins), info)
    name = loaded.manifest.name if loaded.manifest is not None else str(model)
    page_card(loaded, name)  # a task the page cannot show is refused here
    return loaded, name


def page_server(model: Model, name: str, host: str, port: int) -> DemoServer:
    """The served page of ``model`` listening on ``host``:``port`` (0: a free port), not yet
    serving; TrmError when the address cannot be bound."""
    from trm.errors import TrmError
    from trm.plugins.demo.server import DemoServer
    from trm.plugins.demo.session import PageSolver

    try:
        return DemoServer(PageSolver(model, name), host, port)
    except OSError as exc:
        raise TrmError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); give another "
            "--port (0: a free one) or --host"
        ) from None


def run(args: argparse.Namespace) -> int:
    from trm.plugin_manager import load_plugins

    if args.static is not None:
        from trm.plugins.demo.static import check_static_folder, write_static

        check_static_folder(args.static)
    model, name = page_model(args.model, args.plugins)
    if args.static is not None:
        page = write_static(model, name, args.static, load_plugins(args.plugins))
        info(
            f"wrote the static page of {name} to {page.folder} ({page.total_bytes:,} bytes; "
            f"onnxruntime-web {page.onnxruntime_web}); serve the folder with any static "
            f"file server, e.g. python -m http.server -d {page.folder}"
        )
        return 0
    server = page_server(model, name, args.host, args.port)
    print(f"trm demo: {name} at {server.url}", flush=True)
    info("press Ctrl+C to stop")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        info("stopped")
    finally:
        server.server_close()
    return 0
