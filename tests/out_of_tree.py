"""Installing a test package the way a third party's plugin is installed (pip, its own folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def pip_install_target(package: Path, tmp_path_factory) -> Path:
    """``pip install --target`` of ``package`` (no dependencies, no build isolation) into a new
    temporary folder, built in another; returns the folder to put on ``PYTHONPATH``."""
    site = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(package),
        ],
        check=True,
        cwd=build,
    )
    return site
