"""The onnxruntime-web files shipped for the static demo page are the locked ones."""

from __future__ import annotations

import hashlib
import lzma
import re
from pathlib import Path

import tomllib

from trm.plugins.demo.vendor import read_lock, runtime_bytes, vendor_dir, vendored_files

ROOT = Path(__file__).resolve().parent.parent


def test_every_vendored_file_has_the_locked_sha256_and_size():
    files = vendored_files()
    assert {f.name for f in files} == {"ort.wasm.bundle.min.mjs", "ort-wasm-simd-threaded.wasm"}
    for entry in files:
        data = lzma.decompress((vendor_dir() / entry.stored_as).read_bytes())
        assert hashlib.sha256(data).hexdigest() == entry.sha256, entry.name
        assert len(data) == entry.size_bytes
        assert runtime_bytes(entry) == data


def test_the_runtime_is_pinned_to_one_version_and_the_page_loads_only_its_files():
    lock = read_lock()
    assert re.fullmatch(r"\d+\.\d+\.\d+", lock["version"])
    assert lock["package"] == "onnxruntime-web" and lock["integrity"].startswith("sha512-")
    solver = (ROOT / "plugins/demo/page/solver-onnx.js").read_text(encoding="utf-8")
    loaded = set(re.findall(r"\./ort/([\w.-]+)", solver))
    assert loaded == {f.name for f in vendored_files()}


def test_no_page_file_names_another_host():
    for file in (ROOT / "plugins/demo/page").iterdir():
        text = file.read_text(encoding="utf-8")
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text), file.name


def test_the_vendored_files_and_the_page_are_package_data():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = project["tool"]["setuptools"]["package-data"]["trm.plugins.demo"]
    assert set(data) == {"page/*", "vendor/*"}
