"""Fetch onnxruntime-web's wasm-only files into the demo plugin, pinned and hashed.

    python scripts/vendor_onnxruntime_web.py [--version 1.30.0]

Runs ``npm pack onnxruntime-web@VERSION`` (the npm registry, once, when the copy is made or
its version changes), checks the tarball against the registry's integrity field, and keeps
only the files the static page loads: the wasm build's ES module bundle
(``ort.wasm.bundle.min.mjs``, the JavaScript API with its loader inside) and its
WebAssembly binary (``ort-wasm-simd-threaded.wasm``). Each is stored xz-compressed under
plugins/demo/vendor/ (the binary is 14 MB, 2 MB compressed) and its sha256 (of the bytes the
page loads) written to plugins/demo/vendor/onnxruntime-web.lock.json, which
tests/test_demo_vendor.py checks and ``trm demo --static`` verifies before writing a page.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import lzma
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "onnxruntime-web"
DEFAULT_VERSION = "1.30.0"
FILES = ("ort.wasm.bundle.min.mjs", "ort-wasm-simd-threaded.wasm")
VENDOR = Path(__file__).resolve().parent.parent / "plugins" / "demo" / "vendor"
LOCK = VENDOR / "onnxruntime-web.lock.json"


def _npm_pack(version: str, folder: Path) -> tuple[Path, str]:
    """The packed tarball of PACKAGE@version in ``folder`` and its registry integrity."""
    done = subprocess.run(
        ["npm", "pack", f"{PACKAGE}@{version}", "--json", "--pack-destination", str(folder)],
        check=True,
        capture_output=True,
        text=True,
    )
    (packed,) = json.loads(done.stdout)
    return folder / packed["filename"], packed["integrity"]


def _check_integrity(tarball: Path, integrity: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    digest = base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode()
    if digest != expected:
        sys.exit(f"{tarball.name}: {algorithm} {digest} is not the registry's {expected}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=DEFAULT_VERSION, help="onnxruntime-web version")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        tarball, integrity = _npm_pack(args.version, Path(temp))
        _check_integrity(tarball, integrity)
        with tarfile.open(tarball) as archive:
            package = json.load(archive.extractfile("package/package.json"))  # type: ignore[arg-type]
            contents = {
                name: archive.extractfile(f"package/dist/{name}").read()  # type: ignore[union-attr]
                for name in FILES
            }
    for old in VENDOR.glob("*.xz"):
        old.unlink()
    files = []
    for name, data in contents.items():
        (VENDOR / f"{name}.xz").write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        files.append(
            {
                "name": name,
                "sha256": hashlib.sha256(data).hexdigest(),
                "size_bytes": len(data),
                "stored_as": f"{name}.xz",
                "stored_bytes": (VENDOR / f"{name}.xz").stat().st_size,
            }
        )
    lock = {
        "package": PACKAGE,
        "version": package["version"],
        "license": package.get("license"),
        "integrity": integrity,
        "command": f"python scripts/vendor_onnxruntime_web.py --version {args.version}",
        "files": files,
    }
    LOCK.write_text(json.dumps(lock, indent=2) + "\n", encoding="utf-8")
    for entry in files:
        print(f"{entry['name']}: {entry['size_bytes']} bytes, {entry['stored_bytes']} stored")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
