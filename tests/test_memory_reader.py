"""The memory reader: batches gathered and pinned ahead on a background
thread, and the split held once per node (the page cache of its memory-mapped files), not
once per torchrun rank."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.tiny_run import build_tiny_data
from trm.data import reader as reader_module
from trm.data.puzzle_dataset import open_split
from trm.data.reader import MemoryReader, choose_reader
from trm.data.sampler import SplitIndex, TrainSampler
from trm.data.shape import read_shape
from trm.hardware import HardwareProfile
from trm.spec import DataSpec, RunSpec


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build_tiny_data(tmp_path_factory.mktemp("memory-reader") / "data")


def test_the_split_stays_memory_mapped_and_is_read_through_once(data):
    split = open_split(data / "train")
    reader = MemoryReader(split)
    files = 0
    for s in reader.index.split.sets.values():
        for array in (s.inputs, s.labels):
            # the file's pages, which every process that maps it shares: no private copy
            assert isinstance(array, np.memmap) and not array.flags.writeable
            files += array.nbytes
    assert files > 0 and reader.warmed_bytes >= files


def test_the_next_batches_are_gathered_and_pinned_on_a_background_thread(data, monkeypatch):
    split = open_split(data / "train")
    sampler = TrainSampler(SplitIndex(split), 8, seed=3)
    pinned_on: list[str] = []

    def pin(batch):
        pinned_on.append(threading.current_thread().name)
        return batch

    monkeypatch.setattr(reader_module, "pinned", pin)
    ahead = MemoryReader(split, prefetch_steps=3, pin_memory=True)
    plain = MemoryReader(split)
    ahead.start(sampler.examples_for_step, 0)
    plain.start(sampler.examples_for_step, 0)
    try:
        for step in range(12):
            got, want = ahead.batch(step), plain.batch(step)
            for key in want:
                np.testing.assert_array_equal(got[key], want[key])
    finally:
        ahead.close()
    assert len(pinned_on) >= 12 and set(pinned_on) == {"trm-prefetch"}


def test_the_memory_reader_prefetches_as_many_steps_as_the_spec_says(data):
    shape = read_shape(data, "train")
    spec = RunSpec(data=DataSpec(prefetch_steps=5))
    choice = choose_reader(spec, shape, HardwareProfile(memory_budget_bytes=2**34))
    assert choice.name == "memory" and choice.prefetch_steps == 5


def test_on_a_gpu_the_memory_reader_reads_ahead_and_pins_on_the_cpu_in_the_loop(data):
    from trm.data.reader import ReaderChoice
    from trm.loop.setup import open_reader
    from trm.plugin_manager import load_plugins

    split, choice, pm = (
        open_split(data / "train"),
        ReaderChoice("memory", "test", 4),
        load_plugins([]),
    )
    from trm.plugins.backends.cpu import CPU
    from trm.plugins.backends.cuda import CUDA

    gpu = open_reader(pm, split, choice, "cuda:0", CUDA)
    assert (gpu.name, gpu.prefetch_steps, gpu.pin_memory) == ("memory", 4, True)
    cpu = open_reader(pm, split, choice, "cpu", CPU)
    assert (cpu.prefetch_steps, cpu.pin_memory) == (0, False)
