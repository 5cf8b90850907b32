"""The host-read budget: one read of device values per optimizer step, whatever the
micro-batch count, metrics logged every step included; and one per evaluation, whatever its
batch count.

A ``TorchDispatchMode`` counts every operator that makes the host wait for a device value:
``_local_scalar_dense`` (``float()``, ``.item()``, ``bool()``), ``nonzero``, the ``unique``
family, ``masked_select`` and boolean-mask indexing (data-dependent shapes) and copies to the
CPU that change no dtype. On the CPU these are cheap, but on a GPU each drains the queue and
on a lazy-tensor device (XLA) each cuts and runs a graph, so the same count is what matters
there. On the CPU the mode cannot see ``.tolist()`` or ``.numpy()`` of a host tensor (no
operator runs): tests/test_xla.py counts those too, with PyTorch/XLA's own transfer counter on
the CPU PJRT device. The counts come from a real ``trm run`` of the tiny spec, which has a
puzzle embedding (sign-SGD), EMA and exploration, per loop step (``Trainer.take_step``: the
batch, the step, the metrics row) and per evaluation.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.tiny_run import GLOBAL_BATCH, build_tiny_data, write_spec
from trm.cli.main import main
from trm.loop.loop import Trainer

aten = torch.ops.aten
SYNC_OPS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.is_nonzero.default,
}
BUDGET_PER_STEP = 1


class HostSyncCounter(TorchDispatchMode):
    """Counts the operators that read device values back to the host, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNC_OPS:
            self.counts[str(func)] += 1
        elif func is aten._to_copy.default and _is_copy_to_host(args[0], kwargs):
            self.counts["copy to host"] += 1
        elif func is aten.index.Tensor and any(
            index is not None and index.dtype == torch.bool for index in args[1]
        ):
            self.counts["boolean-mask index"] += 1
        return func(*args, **kwargs)


def _is_copy_to_host(tensor: torch.Tensor, kwargs: dict) -> bool:
    """A copy to the CPU that changes no dtype: a device-to-host transfer on an accelerator
    (a dtype cast that autograd spells with ``device=`` stays on the device there)."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    same_dtype = dtype is None or dtype == tensor.dtype
    return device is not None and torch.device(device).type == "cpu" and same_dtype


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return build_tiny_data(tmp_path_factory.mktemp("syncs") / "data")


def counted_run(monkeypatch, tmp_path, data, micro: int) -> list[Counter[str]]:
    """Run the tiny spec (no evaluation) with ``micro`` rows per micro-batch; the host syncs of
    each loop step."""
    per_step: list[Counter[str]] = []
    original = Trainer.take_step

    def counting_take_step(self, state, data, control):
        with HostSyncCounter() as counter:
            record = original(self, state, data, control)
        per_step.append(counter.counts)
        return record

    monkeypatch.setattr(Trainer, "take_step", counting_take_step)
    spec = write_spec(tmp_path, data, micro=micro, eval_interval=1000, max_steps=4)
    assert main(["run", str(spec), "--out", str(tmp_path / f"run{micro}")]) == 0
    return per_step


@pytest.mark.parametrize("micro_batches", [1, 2, 4])
def test_a_step_reads_the_device_once(monkeypatch, tmp_path, tiny_data, micro_batches):
    steps = counted_run(monkeypatch, tmp_path, tiny_data, GLOBAL_BATCH // micro_batches)
    assert len(steps) == 4
    for number, counts in enumerate(steps, start=1):
        total = sum(counts.values())
        assert total == BUDGET_PER_STEP, f"step {number}: {total} host syncs {dict(counts)}"


@pytest.mark.parametrize("micro", [2, 4])
def test_an_evaluation_reads_the_device_once_whatever_its_batch_count(
    monkeypatch, tmp_path, tiny_data, micro
):
    import trm.evaluation.evaluate as evaluation

    per_eval: list[Counter[str]] = []
    original = evaluation.evaluate

    def counting_evaluate(*args, **kwargs):
        with HostSyncCounter() as counter:
            result = original(*args, **kwargs)
        per_eval.append(counter.counts)
        return result

    monkeypatch.setattr(evaluation, "evaluate", counting_evaluate)
    spec = write_spec(tmp_path, tiny_data, micro=micro, eval_interval=2, max_steps=4)
    assert main(["run", str(spec), "--out", str(tmp_path / "run")]) == 0
    assert len(per_eval) == 2  # steps 2 and 4: 8 examples in batches of ``micro``
    for counts in per_eval:
        assert sum(counts.values()) == 1, dict(counts)


def test_the_counter_sees_the_reads_it_is_meant_to_catch():
    with HostSyncCounter() as counter:
        x = torch.arange(6.0)
        float(x.sum())
        torch.unique(x)
        x[x > 2].sum()
        x.to("cpu", copy=True)
        x[0].item()
        x.float()  # no copy: already float32 on the host
    assert counter.counts["aten._local_scalar_dense.default"] == 2
    assert counter.counts["aten._unique2.default"] == 1
    assert counter.counts["copy to host"] == 1
    assert counter.counts["boolean-mask index"] == 1
