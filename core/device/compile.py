"""torch.compile for a run: whether it can work here, what of the TRM is compiled, and the
fallback to eager when compiling fails at the first step.

Backend plugins decide with :func:`choose_compile` (``runtime.compile`` = auto, on, off),
asking their backend's ``compile_unavailable_reason`` (the helpers below check the toolchains
Inductor needs); the loop applies the decision with :func:`compile_network`. What is compiled is
the model's recursion region (``model.region``, :mod:`trm.model.region`): every call of the
shared network over a supervision step's cycles and the output heads, as one graph, in place
(state-dict keys and checkpoints are unchanged). It is where nearly all the FLOPs are, and
compiling it fuses the RMS norms, SiLU, residual and injection sums and casts between the matrix
products across the calls. The input embeddings (the sparse puzzle embedding makes a fresh leaf
tensor on every call), the noise draws and the ACT bookkeeping stay eager.

Compiling happens lazily, at the first forward. When it fails there (a missing C compiler or
Python headers in a bare container, an Inductor bug: ``BackendCompilerFailed``), the step is
undone like an out-of-memory one and runs again eager (:func:`is_compile_failure`,
:func:`uncompile_network`), with one line saying why.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

import torch

from trm.device.compile_ledger import use_persistent_compile_cache
from trm.device.contract import DeviceBackend
from trm.errors import TrmError

_CXX_NAMES = ("g++", "c++", "clang++")
_CC_NAMES = ("gcc", "cc", "clang")


def cpp_compiler() -> str | None:
    """Path of the C++ compiler Inductor would use on CPU (``$CXX`` first), or None."""
    return _first_on_path(os.environ.get("CXX"), _CXX_NAMES)


def c_compiler() -> str | None:
    """Path of the C compiler Triton builds its launcher with (``$CC`` first), or None."""
    return _first_on_path(os.environ.get("CC"), _CC_NAMES)


def python_headers() -> str | None:
    """The folder holding ``Python.h`` (Triton's launcher includes it), or None."""
    include = sysconfig.get_paths().get("include")
    return include if include and (Path(include) / "Python.h").exists() else None


def _first_on_path(preferred: str | None, names: tuple[str, ...]) -> str | None:
    for name in ([preferred] if preferred else []) + list(names):
        path = shutil.which(name)
        if path:
            return path
    return None


def dynamo_unavailable_reason() -> str | None:
    """Why Dynamo (the front of torch.compile) cannot run in this Python, or None."""
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is not None and hasattr(dynamo, "is_dynamo_supported"):
        try:
            supported = dynamo.is_dynamo_supported()
        except Exception:
            supported = False
        if not supported:
            return f"torch.compile does not support Python {sys.version.split()[0]} here"
    return None


def choose_compile(
    setting: str, backend: DeviceBackend, large_network: bool = True
) -> tuple[bool, str | None]:
    """Decide ``runtime.compile`` (auto, on, off) for ``backend``: (compile?, notice).

    ``auto`` compiles where possible and the network is large (``large_network``, see
    :func:`trm.measure.flops.matmul_bound`); for a small one it answers (False, None) and the
    planner decides from the run's steps and this machine's measured compile cost
    (:func:`planner_decides`, :mod:`trm.plan.compile_choice`). Where torch.compile cannot
    run, ``auto`` runs eager with a one-line notice naming the reason, ``on`` is a TrmError
    naming it; ``off`` never compiles.
    """
    if setting == "off":
        return False, None
    reason = dynamo_unavailable_reason() or backend.compile_unavailable_reason()
    if reason is None:
        return large_network or setting == "on", None
    if setting == "on":
        raise TrmError(
            f"runtime.compile = 'on' but torch.compile cannot run on {backend.name} here: "
            f"{reason}; set runtime.compile = 'auto' or 'off'"
        )
    return False, f"running eager (not compiled): {reason}"


def planner_decides(setting: str, backend: DeviceBackend, large_network: bool) -> bool:
    """True when ``runtime.compile = "auto"`` leaves the choice to the planner: a small network
    on a backend where torch.compile can run (:mod:`trm.device.compile_payoff`)."""
    if setting != "auto" or large_network:
        return False
    return (dynamo_unavailable_reason() or backend.compile_unavailable_reason()) is None


# Graphs Dynamo may keep for the region before it runs the region eager: one per depth a
# schedule visits, times training and evaluation (grad mode), a first static shape and then
# dynamic ones; torch's default (8) can be reached by a curriculum run with evaluations.
REGION_RECOMPILE_LIMIT = 32


def compiled_unit(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module :func:`compile_network` compiles: ``model.region`` (the recursion of a
    supervision step), or ``model.net`` for a model without one; None when it has neither."""
    unit = getattr(model, "region", None)
    return unit if unit is not None else getattr(model, "net", None)


def compile_network(
    model: torch.nn.Module, backend: DeviceBackend, graphs: bool = False
) -> torch.nn.Module:
    """Compile the model's recursion region (:func:`compiled_unit`) in place with
    ``backend``; returns ``model``.

    The first shapes compile static; a later shape (an evaluation batch, a smaller
    micro-batch) recompiles once with dynamic sizes. ``graphs``: replay the compiled kernels
    as device graphs where the backend has them (CUDA graphs). Raises Dynamo's recompile
    limit to :data:`REGION_RECOMPILE_LIMIT` where it is lower. Idempotent: an already
    compiled model is left as it is.
    """
    unit = compiled_unit(model)
    if unit is None or is_compiled(model):
        return model
    use_persistent_compile_cache()
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # the name changed in torch 2.7
        if isinstance(getattr(config, name, None), int):
            setattr(config, name, max(getattr(config, name), REGION_RECOMPILE_LIMIT))
            break
    if graphs:
        backend.compile(unit, graphs=True)
    else:  # a backend written before device graphs takes the module alone
        backend.compile(unit)
    unit._trm_graphs = graphs
    return model


def uses_graphs(model: torch.nn.Module) -> bool:
    """Whether the model was compiled to replay device graphs."""
    return is_compiled(model) and bool(getattr(compiled_unit(model), "_trm_graphs", False))


def compile_without_graphs(model: torch.nn.Module, backend: DeviceBackend) -> None:
    """Compile the model again, without device graphs (after their capture failed)."""
    uncompile_network(model)
    compile_network(model, backend, graphs=False)


def is_compiled(model: torch.nn.Module) -> bool:
    """Whether the model's recursion runs through torch.compile (its :func:`compiled_unit`)."""
    unit = compiled_unit(model)
    return unit is not None and getattr(unit, "_compiled_call_impl", None) is not None


def uncompile_network(model: torch.nn.Module) -> None:
    """Make the model run eager again (after a compile failure); weights untouched."""
    unit = compiled_unit(model)
    if unit is not None:
        unit._compiled_call_impl = None
        unit._trm_graphs = False


def is_compile_failure(error: BaseException) -> bool:
    """True when ``error`` comes from torch.compile's compiler stack rather than the model:
    Dynamo's ``BackendCompilerFailed``, Inductor's errors, a C/C++ toolchain failure."""
    for kind in type(error).__mro__:
        module = getattr(kind, "__module__", "") or ""
        if kind.__name__ in ("BackendCompilerFailed", "InductorError", "CppCompileError"):
            return True
        if module.startswith(("torch._dynamo", "torch._inductor")) and kind.__name__.endswith(
            ("Error", "Failed")
        ):
            return kind.__name__ not in ("Unsupported", "UserError")
    return False


# Where torch records and replays CUDA graphs: an error raised from these files is a failed
# capture or replay, whatever its type (CUDA reports them as plain RuntimeErrors).
_GRAPH_FILES = ("_inductor/cudagraph_trees.py", "_inductor/cudagraph_utils.py", "cuda/graphs.py")


def is_graph_failure(error: BaseException) -> bool:
    """True when ``error`` comes from capturing or replaying device graphs: a compile
    failure (:func:`is_compile_failure`), an error raised in torch's CUDA-graph code (read
    from the traceback, so call it before dropping the frames), or CUDA's own complaint about
    an operation during a capture."""
    if is_compile_failure(error):
        return True
    if "capturing" in str(error).lower():
        return True
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if filename.endswith(_GRAPH_FILES):
            return True
        tb = tb.tb_next
    return False


def compile_failure_summary(error: BaseException) -> str:
    """The failure in one clause: the error's type and its first meaningful line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    detail = next((line for line in lines if not line.startswith("backend=")), "")
    detail = detail[:160]
    return f"{type(error).__name__}: {detail}" if detail else type(error).__name__
