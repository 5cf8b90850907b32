"""Datasheet dense bf16 peaks of common GPUs: the denominator the field's MFU figures use.

MFU as papers and other trainers report it divides achieved model FLOP/s by the vendor's
dense (no structured sparsity) bf16 tensor-core peak, not by a measured GEMM rate; ``trm
bench`` reports both, named. CPUs have no such figure: their MFU stays against the measured
GEMM peak (:mod:`.peak`).
"""

from __future__ import annotations

import re

import torch
from attrs import frozen

from trm.hardware import HardwareProfile


@frozen
class DatasheetPeak:
    """``model``'s dense bf16 tensor-core peak, ``bf16_dense_tflops``, from ``source``."""

    model: str
    bf16_dense_tflops: float
    source: str

    @property
    def gflops(self) -> float:
        return self.bf16_dense_tflops * 1000.0

    def describe(self) -> str:
        return f"datasheet dense bf16 peak of the {self.model}, {self.bf16_dense_tflops:g} TFLOP/s"


# The vendors' dense figures (half of the "with sparsity" figure where a sheet prints only
# that). Sources: NVIDIA H100 Tensor Core GPU datasheet (SXM 989, PCIe 756, NVL 835 TFLOP/s);
# NVIDIA H200 Tensor Core GPU datasheet (SXM 989, NVL 835); NVIDIA A100 Tensor Core GPU
# datasheet (312, 40 GB and 80 GB, SXM and PCIe); NVIDIA L40S datasheet (362); NVIDIA L40
# datasheet (181); NVIDIA L4 datasheet (121); NVIDIA A10 datasheet (125); NVIDIA Ada GPU
# architecture whitepaper, appendix table (GeForce RTX 4090: 165.2 with FP32 accumulate);
# NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090: 71).
H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet"
H200_SHEET = "NVIDIA H200 Tensor Core GPU datasheet"
A100_SHEET = "NVIDIA A100 Tensor Core GPU datasheet"
# (pattern on the device name as the driver reports it, case-insensitive; first match wins)
_TABLE: tuple[tuple[str, DatasheetPeak], ...] = (
    (r"\bH100\b.*\bPCIe\b", DatasheetPeak("H100 PCIe", 756.0, H100_SHEET)),
    (r"\bH100\b.*\bNVL\b", DatasheetPeak("H100 NVL", 835.0, H100_SHEET)),
    (r"\bH100\b", DatasheetPeak("H100 SXM", 989.0, H100_SHEET)),
    (r"\bH200\b.*\bNVL\b", DatasheetPeak("H200 NVL", 835.0, H200_SHEET)),
    (r"\bH200\b", DatasheetPeak("H200 SXM", 989.0, H200_SHEET)),
    (r"\bGH200\b", DatasheetPeak("GH200", 989.0, "NVIDIA GH200 Grace Hopper datasheet")),
    (r"\bA100\b", DatasheetPeak("A100", 312.0, A100_SHEET)),
    (r"\bL40S\b", DatasheetPeak("L40S", 362.0, "NVIDIA L40S datasheet")),
    (r"\bL40\b", DatasheetPeak("L40", 181.0, "NVIDIA L40 datasheet")),
    (r"\bL4\b", DatasheetPeak("L4", 121.0, "NVIDIA L4 datasheet")),
    (r"\bA10\b", DatasheetPeak("A10", 125.0, "NVIDIA A10 datasheet")),
    (
        r"\bRTX 4090\b",
        DatasheetPeak("GeForce RTX 4090", 165.2, "NVIDIA Ada GPU architecture whitepaper"),
    ),
    (
        r"\bRTX 3090\b",
        DatasheetPeak("GeForce RTX 3090", 71.0, "NVIDIA GA102 GPU architecture whitepaper"),
    ),
)


def datasheet_peak(device_name: str | None) -> DatasheetPeak | None:
    """The datasheet peak of the GPU the driver names ``device_name`` (e.g. "NVIDIA H100 80GB
    HBM3" is the H100 SXM); None for a name not in the table, or None."""
    if not device_name:
        return None
    for pattern, peak in _TABLE:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return peak
    return None


def accelerator_name(hardware: HardwareProfile, device: str) -> str | None:
    """The name of the accelerator ``device`` (a torch device name: ``KIND`` or ``KIND:N``)
    runs on, from ``hardware``'s accelerators of that kind (index 0 when the device names
    none); None for the CPU or an unknown device."""
    place = torch.device(device)
    index = place.index or 0
    return next(
        (
            found.name
            for found in hardware.accelerators or ()
            if found.kind == place.type and found.index == index
        ),
        None,
    )
