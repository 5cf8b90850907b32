"""Out of memory in a step: undo it, ask the plugins for less memory, take it again.

On out of memory in a forward or backward the step is undone — gradients dropped, the RNG
restored, the carry never written (see :mod:`trm.loop.step`), the error's frames released —
and ``on_out_of_memory`` asks the plugins for less memory: activation checkpointing switched
on (the micro-batch is kept) or a smaller micro-batch. The same examples then run again with
the same exploration draws. With neither the run fails.

A compiled network whose compilation fails at the step (torch.compile compiles lazily: a
missing toolchain shows only then) is undone the same way and the step runs again eager,
with one line saying why (:mod:`trm.device.compile`). A network compiled to replay device
graphs (CUDA graphs) whose capture fails first runs again compiled without graphs, with one
line; a second failure then runs it eager.
"""

from __future__ import annotations

import numpy as np

from trm.control import TrainControl, fit_micro_batch
from trm.device.compile import (
    compile_failure_summary,
    compile_without_graphs,
    is_compile_failure,
    is_compiled,
    is_graph_failure,
    uncompile_network,
    uses_graphs,
)
from trm.device.oom import is_out_of_memory
from trm.device.rng import capture_rng, restore_rng
from trm.errors import TrainingFailed
from trm.loop.requests import apply_activation_checkpointing_request, set_micro_batch
from trm.loop.step import StepSetup, attempt_step
from trm.metrics_log import Journal
from trm.plugin_manager import TrmPluginManager
from trm.state import TrainState, last_good, recomputes_activations


def take_step(
    state: TrainState,
    batch: dict[str, np.ndarray],
    setup: StepSetup,
    pm: TrmPluginManager,
    control: TrainControl,
    journal: Journal,
) -> dict[str, float]:
    """One optimizer update over ``batch``, retried at a smaller micro-batch after OOM, or
    eager after a compile failure."""
    backend, device = setup.placement.backend, setup.placement.device
    rng = capture_rng(backend, device)
    while True:
        try:
            return attempt_step(state, batch, setup)
        except Exception as exc:
            compile_failed = is_compiled(state.model) and is_compile_failure(exc)
            graphs_failed = uses_graphs(state.model) and is_graph_failure(exc)
            if not (compile_failed or graphs_failed) and not is_out_of_memory(exc, backend):
                raise
            error = exc.with_traceback(None)  # drop the frames that hold activations
        for opt in state.optimizers:
            opt.zero_grad(set_to_none=True)
        restore_rng(rng, backend, device)
        if graphs_failed:
            compile_without_graphs(state.model, backend)
            journal.event(state.step + 1, "graphs_failed", quiet=True, error=str(error)[:500])
            journal.log(
                f"capturing the step as device graphs failed ({compile_failure_summary(error)}); "
                "running compiled without them from here (set runtime.cuda_graphs = 'off' to "
                "skip the attempt)"
            )
            continue
        if compile_failed:
            uncompile_network(state.model)
            journal.event(state.step + 1, "compile_failed", quiet=True, error=str(error)[:500])
            journal.log(
                f"torch.compile failed ({compile_failure_summary(error)}); running eager "
                "from here (set runtime.compile = 'off' to skip the attempt)"
            )
            continue
        _shrink_or_fail(state, error, pm, control, journal)


def _shrink_or_fail(
    state: TrainState,
    error: BaseException,
    pm: TrmPluginManager,
    control: TrainControl,
    journal: Journal,
) -> None:
    step, old = state.step + 1, state.micro_batch_size
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    control.micro_batch_request = None
    control.activation_checkpointing_request = None
    pm.hook.on_out_of_memory(state=state, error=error, control=control)
    journal.show(control)
    recompute = control.activation_checkpointing_request
    already = recomputes_activations(state.model)
    if recompute is not None and recompute[0] and not already:
        control.micro_batch_request = None  # recomputation first; a later OOM may halve
        journal.event(step, "out_of_memory", quiet=True, micro_batch_size=old, error=detail)
        journal.log(f"step {step}: out of memory at micro-batch {old} ({detail}); retrying")
        apply_activation_checkpointing_request(state, control, journal, step)
        return
    control.activation_checkpointing_request = None
    request, control.micro_batch_request = control.micro_batch_request, None
    new = (
        old if request is None else fit_micro_batch(request[0], state.spec.train.global_batch_size)
    )
    if new >= old:
        if old == 1:
            why = "the micro-batch is already 1"
        elif request is None:
            why = "no plugin reduced the micro-batch (is memory-guard off?)"
        else:
            why = "the micro-batch cannot shrink further"
        raise TrainingFailed(
            f"step {step}: out of memory with micro-batch {old} ({detail}); {why}; "
            f"{last_good(state)} — free memory or use a smaller model, then resume"
        )
    journal.event(step, "out_of_memory", quiet=True, micro_batch_size=old, error=detail)
    journal.log(f"step {step}: out of memory at micro-batch {old} ({detail}); retrying the step")
    assert request is not None
    set_micro_batch(state, new, request[1], step, journal)
