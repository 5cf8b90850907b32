"""The data readers: the stream reader's prefetching, what a run records of its waits, the
reader choice, and its bad input."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import attrs
import numpy as np
import pytest

from tests.conftest import error_lines
from tests.tiny_run import build_tiny_data, metrics, summary, write_spec
from trm.data.puzzle_dataset import open_split
from trm.data.reader import MemoryReader, choose_reader
from trm.data.sampler import SplitIndex, TrainSampler
from trm.data.shape import read_shape
from trm.hardware import HardwareProfile
from trm.plugins.operations import streaming
from trm.spec import load_spec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("stream")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data)
    return SimpleNamespace(base=base, data=data, spec=spec)


def _streamed(spec_path, folder, prefetch=2):
    path = folder / "streamed.toml"
    text = spec_path.read_text()
    path.write_text(
        text.replace("[data]\n", f'[data]\nreader = "stream"\nprefetch_steps = {prefetch}\n')
    )
    return path


def test_the_prefetcher_serves_consecutive_steps_and_restarts_anywhere():
    produced = []

    def produce(step):
        produced.append(step)
        return {"step": np.array([step])}

    prefetcher = streaming.Prefetcher(produce, depth=3)
    try:
        assert [int(prefetcher.get(s)["step"][0]) for s in (5, 6, 7)] == [5, 6, 7]
        assert int(prefetcher.get(2)["step"][0]) == 2  # a restart (an OOM retry never asks)
        assert int(prefetcher.get(3)["step"][0]) == 3
    finally:
        prefetcher.close()
    assert produced[:3] == [5, 6, 7]


def test_the_prefetcher_stays_at_most_depth_ahead_and_stops_cleanly():
    started = threading.Event()

    def produce(step):
        started.set()
        return {"step": np.array([step])}

    prefetcher = streaming.Prefetcher(produce, depth=2)
    prefetcher.get(0)
    time.sleep(0.2)
    assert prefetcher._queue.qsize() <= 2
    prefetcher.close()
    assert prefetcher._thread is None


def test_an_error_while_reading_is_raised_for_its_step():
    def produce(step):
        if step == 1:
            raise OSError("disk gone")
        return {"step": np.array([step])}

    prefetcher = streaming.Prefetcher(produce, depth=2)
    try:
        prefetcher.get(0)
        with pytest.raises(OSError, match="disk gone"):
            prefetcher.get(1)
    finally:
        prefetcher.close()


def test_stream_and_memory_readers_give_identical_batches(tiny):
    split = open_split(tiny.data / "train")
    sampler = TrainSampler(SplitIndex(split), 8, seed=3)
    memory, stream = MemoryReader(split), streaming.StreamingReader(split, 3, pin_memory=False)
    memory.start(sampler.examples_for_step, 0)
    stream.start(sampler.examples_for_step, 0)
    try:
        for step in range(20):
            a, b = memory.batch(step), stream.batch(step)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
    finally:
        stream.close()


def test_an_oom_retry_reads_the_same_batch_once(tiny, tmp_path, cli, monkeypatch):
    asked = []
    real = streaming.StreamingReader.batch

    def batch(self, step):
        asked.append(step)
        return real(self, step)

    monkeypatch.setattr(streaming.StreamingReader, "batch", batch)
    monkeypatch.setenv("TRM_FAULTS", "oom@3")
    spec = _streamed(tiny.spec, tmp_path)
    result = cli("run", spec, "--out", tmp_path / "run", "--plugins", "faults")
    assert result.code == 0, result.err
    assert asked == list(range(12))  # step 3 (index 2) was retried from the batch it held
    assert summary(tmp_path / "run")["samples"] == 12 * 8


def test_each_row_records_its_data_wait_and_the_summary_its_share(tiny, tmp_path, cli):
    spec = _streamed(tiny.spec, tmp_path, prefetch=0)
    assert cli("run", spec, "--out", tmp_path / "run").code == 0
    rows = [r for r in metrics(tmp_path / "run") if "kind" not in r]
    assert all(r["data_wait_s"] >= 0 for r in rows)
    done = summary(tmp_path / "run")
    assert 0 <= done["data_wait_share"] < 1 and done["data_wait_s"] >= 0


def test_auto_streams_a_split_larger_than_a_quarter_of_the_budget(tiny):
    spec = load_spec(tiny.spec)
    shape = read_shape(tiny.data, "train")
    roomy = HardwareProfile(memory_budget_bytes=100 * shape.train_file_bytes)
    tight = HardwareProfile(memory_budget_bytes=2 * shape.train_file_bytes)
    assert choose_reader(spec, shape, roomy).name == "memory"
    chosen = choose_reader(spec, shape, tight)
    assert chosen.name == "stream" and "does not fit 25% of memory" in chosen.reason
    assert chosen.prefetch_steps == spec.data.prefetch_steps


def _tight_budget(monkeypatch, budget_bytes):
    from trm.plan import pipeline

    real = pipeline.detect_hardware
    monkeypatch.setattr(
        pipeline,
        "detect_hardware",
        lambda pm: attrs.evolve(real(pm), memory_budget_bytes=budget_bytes),
    )


def test_a_memory_reader_that_cannot_fit_is_refused_before_training(
    tiny, tmp_path, cli, monkeypatch
):
    size = read_shape(tiny.data, "train").train_file_bytes
    _tight_budget(monkeypatch, size)  # the split would take 100% of the budget
    for command in (["estimate"], ["run", "--out", tmp_path / "r"]):
        result = cli(*command, tiny.spec, "--set", "data.reader=memory")
        assert result.code == 2, result.err
        (line,) = error_lines(result.err)
        assert "data.reader = 'memory' cannot hold the train split" in line
        assert "memory budget" in line and "Traceback" not in result.err
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_estimate_says_which_reader_and_why(tiny, cli):
    result = cli("estimate", tiny.spec, "--json")
    assert result.code == 0, result.err
    import json

    doc = json.loads(result.out)
    assert doc["reader"]["name"] == "memory" and "fits in memory" in doc["reader"]["reason"]
    assert any(i["name"] == "data-loader buffers" for i in doc["items"])


def test_the_stream_reader_needs_its_plugin(tiny, tmp_path, cli):
    spec = _streamed(tiny.spec, tmp_path)
    result = cli("run", spec, "--plugins", "no:streaming", "--out", tmp_path / "run")
    assert result.code == 2
    (line,) = error_lines(result.err)
    assert "data.reader 'stream': no plugin serves it" in line


def test_a_run_resumes_with_another_reader(tiny, tmp_path, cli):
    """How data are read is not part of the run: switching readers resumes it."""
    run_dir = tmp_path / "run"
    assert cli("run", tiny.spec, "--max-steps", "3", "--out", run_dir).code == 0
    streamed = _streamed(tiny.spec, tmp_path)
    result = cli("run", streamed, "--max-steps", "5", "--out", run_dir)
    assert result.code == 0, result.err
    assert "resumed from step 3" in result.err and "data reader: stream" in result.err
    assert summary(run_dir)["steps"] == 5


def test_the_stream_reader_pins_where_the_backend_says_whatever_the_device_is_called(tiny):
    """A third party's backend that copies from pinned memory gets pinned streamed batches
    too (the reader used to guess from a device name starting with "cuda")."""
    from trm.data.reader import ReaderChoice
    from trm.loop.setup import open_reader
    from trm.plugin_manager import load_plugins
    from trm.plugins.backends.cpu import CPU, CpuDevice
    from trm.plugins.backends.cuda import CUDA

    class PinningAccelerator(CpuDevice):
        name = torch_type = "npu"
        pins_host_batches = True

        def uses_device_memory(self):
            return True

    split, choice = open_split(tiny.data / "train"), ReaderChoice("stream", "t", 2)
    pm = load_plugins([])
    npu = open_reader(pm, split, choice, "npu:0", PinningAccelerator())
    assert (npu.name, npu.pin_memory) == ("stream", True)
    gpu = open_reader(pm, split, choice, "cuda:0", CUDA)
    assert gpu.pin_memory is True
    cpu = open_reader(pm, split, choice, "cpu", CPU)
    assert (cpu.name, cpu.pin_memory) == ("stream", False)


def test_a_reader_plugin_written_for_the_older_hook_arguments_still_answers(tiny):
    """``open_dataset`` gained ``pin_memory``; an implementation taking only the arguments it
    had before (split, choice, device) is still called."""
    from trm import hookimpl
    from trm.data.reader import MemoryReader, ReaderChoice
    from trm.loop.setup import open_reader
    from trm.plugin_manager import load_plugins
    from trm.plugins.backends.cpu import CPU

    seen = []

    class OldReaderPlugin:
        @hookimpl
        def open_dataset(self, split, choice, device):
            seen.append(device)
            return MemoryReader(split) if choice.name == "old" else None

    pm = load_plugins([])
    pm.pm.register(OldReaderPlugin(), name="old-reader")
    reader = open_reader(
        pm, open_split(tiny.data / "train"), ReaderChoice("old", "t", 0), "cpu", CPU
    )
    assert isinstance(reader, MemoryReader) and seen == ["cpu"]
