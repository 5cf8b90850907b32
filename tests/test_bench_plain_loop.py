"""``trm bench``'s plain loop times trm's own optimizer step (``trm.loop.step.attempt_step``)
on the plain model: the reference's token-major layout, fp32 without autocast, eager, one
call per step in order, over the steps' batches."""

from __future__ import annotations

from trm.loop import step as loop_step
from trm.measure import loop_timing
from trm.plan.dataset import ensure_dataset
from trm.plugin_manager import load_plugins
from trm.runtime import RuntimeChoice
from trm.spec import load_spec, resolve_spec_path

BATCH = 8
WARMUP = 1
STEPS = 2


def test_the_plain_loop_times_the_real_step_on_the_plain_model(tmp_path, monkeypatch):
    spec = load_spec(resolve_spec_path("quickstart"))
    pm = load_plugins([])
    data_dir = ensure_dataset(pm, loop_timing.small_data_spec(spec, pm, BATCH), tmp_path, print)
    runtime = RuntimeChoice(device="cpu", precision="fp32", threads=1, compile=False)
    seen = []

    def counted(state, batch, setup):
        seen.append(
            (
                state.step,
                state.model.net.position_major,
                setup.placement.dtype,
                len(batch["inputs"]),
            )
        )
        return loop_step.attempt_step(state, batch, setup)

    monkeypatch.setattr(loop_timing, "attempt_step", counted)
    timing = loop_timing.time_plain_loop(
        loop_timing.bench_spec(spec, BATCH, WARMUP + STEPS), runtime, data_dir, WARMUP, STEPS
    )
    assert seen == [(step, False, None, BATCH) for step in range(WARMUP + STEPS)]
    assert len(timing.warmup_s) == WARMUP and len(timing.step_s) == STEPS
    assert timing.batch_size == BATCH
