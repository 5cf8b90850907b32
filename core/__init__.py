"""trm: train Tiny Recursive Models on the hardware you have.

Plugin authors need only ``from trm import hookimpl``; hook contracts live in
:mod:`trm.hookspecs`.
"""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("trm")

from trm.errors import TrmError  # noqa: E402

__all__ = ["TrmError", "__version__", "hookimpl"]
