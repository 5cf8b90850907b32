"""MFU as the field counts it: the datasheet dense bf16 peak of a GPU found from the name its
driver reports, and trm bench's fields that carry it beside the measured-peak MFU."""

from __future__ import annotations

import pytest

from trm.hardware import AcceleratorInfo, HardwareProfile
from trm.plan.pipeline import choose_runtime, detect_hardware
from trm.plugin_manager import load_plugins
from trm.plugins.measure.bench import run_bench
from trm.plugins.measure.datasheet import accelerator_name, datasheet_peak
from trm.spec import load_spec, resolve_spec_path


@pytest.mark.parametrize(
    ("reported", "model", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.0),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", "H100 NVL", 835.0),
        ("NVIDIA H200", "H200 SXM", 989.0),
        ("NVIDIA H200 NVL", "H200 NVL", 835.0),
        ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
        ("NVIDIA A100-PCIE-40GB", "A100", 312.0),
        ("NVIDIA L40S", "L40S", 362.0),
        ("NVIDIA L40", "L40", 181.0),
        ("NVIDIA L4", "L4", 121.0),
        ("NVIDIA A10", "A10", 125.0),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 165.2),
    ],
)
def test_a_driver_reported_gpu_name_finds_its_datasheet_peak(reported, model, tflops):
    peak = datasheet_peak(reported)
    assert peak is not None and peak.model == model
    assert peak.bf16_dense_tflops == tflops and peak.gflops == tflops * 1000
    assert peak.source and model in peak.describe() and "dense bf16" in peak.describe()


@pytest.mark.parametrize("reported", [None, "", "Tesla T4", "AMD EPYC 9B45", "NVIDIA A1000"])
def test_a_name_outside_the_table_has_no_datasheet_peak(reported):
    assert datasheet_peak(reported) is None


def test_the_accelerator_name_is_the_gpu_of_the_device_index():
    hardware = HardwareProfile(
        accelerators=(
            AcceleratorInfo(kind="cuda", index=0, name="NVIDIA H100 80GB HBM3"),
            AcceleratorInfo(kind="cuda", index=1, name="NVIDIA L4"),
        )
    )
    assert accelerator_name(hardware, "cuda") == "NVIDIA H100 80GB HBM3"
    assert accelerator_name(hardware, "cuda:1") == "NVIDIA L4"
    assert accelerator_name(hardware, "cpu") is None
    assert accelerator_name(HardwareProfile(), "cuda") is None


def _quick_bench(device_name):
    spec = load_spec(resolve_spec_path("quickstart"))
    pm = load_plugins([])
    runtime = choose_runtime(pm, spec, detect_hardware(pm))
    return run_bench(
        spec,
        runtime,
        [],
        steps=1,
        warmup=1,
        batch_size=8,
        plain=False,
        log=lambda line: None,
        peak_s=0.05,
        device_name=device_name,
    )


def test_bench_reports_mfu_against_the_datasheet_as_headline_and_the_measured_beside():
    result = _quick_bench("NVIDIA H100 80GB HBM3").to_dict()
    assert result["device_model"] == "H100 SXM"
    assert result["datasheet_peak_gflops"] == 989_000.0
    assert result["mfu_datasheet"] == pytest.approx(result["achieved_gflops"] / 989_000.0)
    assert result["headline_mfu"] == result["mfu_datasheet"]
    assert result["headline_mfu_basis"] == result["mfu_datasheet_basis"]
    assert "datasheet dense bf16 peak of the H100 SXM" in result["headline_mfu_basis"]
    # the measured-peak MFU keeps its field and meaning, named
    assert result["mfu"] == pytest.approx(result["achieved_gflops"] / result["peak_gflops"])
    assert result["mfu_basis"].startswith("measured ") and "GEMM peak" in result["mfu_basis"]


def test_on_a_cpu_the_headline_mfu_is_against_the_measured_peak_named_as_such():
    result = _quick_bench(None).to_dict()
    assert result["mfu_datasheet"] is None and result["datasheet_peak_gflops"] is None
    assert result["headline_mfu"] == result["mfu"]
    assert result["headline_mfu_basis"] == result["mfu_basis"]
    assert "measured" in result["mfu_basis"]
