"""torch.compile for a run: whether it can work here, and what of the TRM is compiled.

Backend plugins decide with :func:`choose_compile` (``runtime.compile`` = auto, on, off);
the loop applies the decision with :func:`compile_for_runtime`. What is compiled is the
shared network ``net`` (in place, so state-dict keys and checkpoints are unchanged): it is
where nearly all the FLOPs are, and compiling it fuses the RMS norms, SiLU, residual sums and
casts between the matrix products. The sparse puzzle embedding, which makes a fresh leaf
tensor on every call, and the ACT bookkeeping stay eager.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import torch

from trm.errors import TrmError
from trm.runtime import RuntimeChoice

_CXX_NAMES = ("g++", "c++", "clang++")


def cpp_compiler() -> str | None:
    """Path of the C++ compiler Inductor would use on CPU (``$CXX`` first), or None."""
    candidates = ([os.environ["CXX"]] if os.environ.get("CXX") else []) + list(_CXX_NAMES)
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


def compile_unavailable_reason(device_type: str) -> str | None:
    """Why torch.compile cannot work for ``device_type`` here, or None when it can.

    Needs Dynamo support for this Python; on CPU a C++ compiler (Inductor writes C++), on
    CUDA Triton; on MPS it is experimental and treated as unavailable.
    """
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is not None and hasattr(dynamo, "is_dynamo_supported"):
        try:
            supported = dynamo.is_dynamo_supported()
        except Exception:
            supported = False
        if not supported:
            return f"torch.compile does not support Python {sys.version.split()[0]} here"
    if device_type == "cpu":
        if sys.platform == "win32":
            return "torch.compile on Windows CPUs needs MSVC set up; not attempted"
        if cpp_compiler() is None:
            return "no C++ compiler found (install g++ or clang++, or set CXX)"
    elif device_type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "Triton is not installed (pip install triton)"
    elif device_type == "mps":
        return "torch.compile on MPS is experimental"
    return None


def choose_compile(
    setting: str, device_type: str, large_network: bool = True
) -> tuple[bool, str | None]:
    """Decide ``runtime.compile`` (auto, on, off) for ``device_type``: (compile?, notice).

    ``auto`` compiles where possible and the network is large (``large_network``, see
    :func:`trm.measure.flops.matmul_bound`: for a small one compiling takes longer than it saves),
    and otherwise runs eager with a one-line notice; ``on`` where impossible is a TrmError
    naming the reason; ``off`` never compiles.
    """
    if setting == "off":
        return False, None
    if setting == "auto" and not large_network:
        return False, "running eager: the network is small, compiling would cost more than it saves"
    reason = compile_unavailable_reason(device_type)
    if reason is None:
        return True, None
    if setting == "on":
        raise TrmError(
            f"runtime.compile = 'on' but torch.compile cannot run on {device_type} here: "
            f"{reason}; set runtime.compile = 'auto' or 'off'"
        )
    return False, f"running eager (not compiled): {reason}"


def compile_for_runtime(model: torch.nn.Module, runtime: RuntimeChoice) -> torch.nn.Module:
    """Compile ``model.net`` in place when ``runtime.compile``; returns ``model``.

    The first shapes compile static; a later shape (an evaluation batch, a smaller
    micro-batch) recompiles once with dynamic sizes. Idempotent: an already compiled network
    is left as it is.
    """
    net = getattr(model, "net", None)
    if not runtime.compile or net is None or getattr(net, "_compiled_call_impl", None):
        return model
    net.compile()
    return model
