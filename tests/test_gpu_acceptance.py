"""benchmarks/gpu.py, the acceptance command of a first GPU run: a dry run on a machine
without CUDA (this one), and its tables built from a canned result."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def gpu():
    if str(BENCHMARKS) not in sys.path:  # as when run as a script: ``tables`` by name
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("gpu_acceptance", BENCHMARKS / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CANNED = {
    "date": "2026-11-25",
    "environment": {
        "driver": "580.65.06, NVIDIA H100 80GB HBM3, 81559 MiB",
        "torch": "2.13.0",
        "torch_cuda": "12.8",
        "triton": "3.5.0",
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85e9}],
    },
    "stages": [
        {"stage": "environment", "ok": True, "detail": "driver, CUDA, bf16"},
        {
            "stage": "quickstart",
            "ok": True,
            "detail": "exit 0",
            "best_exact_accuracy": 0.974,
            "training_wall_s": 21.5,
            "measured_peak_mb": 310.2,
        },
        {
            "stage": "memory estimate",
            "ok": True,
            "detail": "",
            "estimate_mb": 352.0,
            "measured_peak_mb": 310.2,
            "estimate_over_measured": 1.135,
        },
        {
            "stage": "bench sudoku-extreme-mlp",
            "ok": True,
            "detail": "",
            "samples_per_s": 5123.4,
            "mfu": 0.412,
            "peak_gflops": 702000.0,
            "precision": "bf16",
            "speedup_vs_plain": 3.21,
        },
        {"stage": "bench arc-agi-1", "ok": False, "detail": "trm: error: out of memory | x"},
    ],
    "ok": False,
}


def test_without_cuda_it_is_a_dry_run_that_says_what_it_would_run(tmp_path):
    assert not torch.cuda.is_available()  # this machine: the dry run is what is tested
    out = tmp_path / "acceptance"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("dry run: torch.cuda is not available")
    for expected in (
        "-m trm run quickstart --set runtime.device=cuda",
        "-m trm estimate",
        "-m trm bench sudoku-extreme-mlp --set runtime.device=cuda --json",
        "-m trm bench maze-hard-att",
        "-m trm bench arc-agi-1",
        "TRM_FAULTS=kill@50 TRM_FAULTS_RANKS=1",
        "--nproc-per-node 2",
    ):
        assert expected in done.stdout
    assert not out.exists()  # a dry run writes nothing


def test_the_dry_run_prints_one_json_document_with_json(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--out", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["dry_run"] is True and len(document["commands"]) == 7


def test_the_markdown_table_of_a_canned_result(gpu):
    text = gpu.markdown(CANNED)
    lines = text.splitlines()
    assert lines[0].startswith("GPU acceptance run of 2026-11-25: NVIDIA H100 80GB HBM3;")
    assert lines[2] == "| stage | result | figures | detail |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[4:]}
    assert "accuracy 0.974, 21.5 s, peak 310.2 MiB" in rows["quickstart"]
    assert "estimate 352.0 MiB vs measured 310.2 MiB (x1.14)" in rows["memory estimate"]
    bench = rows["bench sudoku-extreme-mlp"]
    assert "5123.4 samples/s, MFU 41.2% of 702000 GFLOP/s (bf16), 3.21x plain eager" in bench
    assert "| FAILED |" in rows["bench arc-agi-1"] and "memory \\| x" in rows["bench arc-agi-1"]


def test_the_environment_verdict_names_what_is_missing(gpu):
    found = {"cuda_available": True, "bf16": True, "gpus": [{}, {}], "triton": "3.5.0"}
    stage = gpu.environment_stage(found)
    assert stage["ok"]  # runs eager without a compiler, but runs
    assert "missing: c_compiler, python_headers" in stage["detail"]
    assert "NCCL is not available" in stage["detail"]


def test_from_json_prints_the_tables_of_a_saved_document(tmp_path):
    saved = tmp_path / "gpu-acceptance.json"
    saved.write_text(json.dumps(CANNED))
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--from-json", str(saved)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "| quickstart | ok |" in done.stdout


def test_the_document_is_written_after_each_stage_so_a_stopped_run_keeps_them(
    gpu, tmp_path, monkeypatch
):
    quickstart, memory = CANNED["stages"][1], CANNED["stages"][2]
    bench_row = CANNED["stages"][3]
    monkeypatch.setattr(gpu, "quickstart_stage", lambda out: (quickstart, memory))
    calls = []

    def bench_then_stopped(spec, steps, batch, out):
        calls.append(spec)
        if len(calls) == 2:  # the second bench is stopped, as by `timeout` or Ctrl-C
            raise KeyboardInterrupt
        return bench_row

    monkeypatch.setattr(gpu, "bench_stage", bench_then_stopped)
    args = gpu.argparse.Namespace(
        out=tmp_path, skip_bench=False, skip_torchrun=True, bench_steps=5, bench_batch=None
    )
    with pytest.raises(KeyboardInterrupt):
        gpu.acceptance(args, {**CANNED["environment"], "cuda_available": True, "bf16": True})
    saved = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    assert [s["stage"] for s in saved["stages"]] == [
        "environment",
        "quickstart",
        "memory estimate",
        "bench sudoku-extreme-mlp",
    ]
    assert saved["complete"] is False
    assert "Stopped before its last stage." in (tmp_path / "gpu-acceptance.md").read_text()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_finished_run_marks_its_document_complete(gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "quickstart_stage", lambda out: tuple(CANNED["stages"][1:3]))
    args = gpu.argparse.Namespace(
        out=tmp_path, skip_bench=True, skip_torchrun=True, bench_steps=5, bench_batch=None
    )
    document = gpu.acceptance(args, {**CANNED["environment"], "cuda_available": True, "bf16": True})
    saved = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    assert saved == document and saved["complete"] is True
    assert len(saved["stages"]) == 3


def test_the_document_carries_its_provenance_and_when_each_stage_ended(gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "quickstart_stage", lambda out: tuple(CANNED["stages"][1:3]))
    args = gpu.argparse.Namespace(
        out=tmp_path, skip_bench=True, skip_torchrun=True, bench_steps=5, bench_batch=None
    )
    gpu.acceptance(args, {**CANNED["environment"], "cuda_available": True, "bf16": True})
    saved = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    assert saved["provenance"]["command"].startswith("python ")
    assert len(saved["provenance"]["commit"].split("-")[0]) == 40
    ended = [stage["finished_after_s"] for stage in saved["stages"]]
    assert ended == sorted(ended) and all(t >= 0 for t in ended)


def test_with_peers_the_dry_run_adds_the_three_shapes_and_fits_nine_minutes(tmp_path):
    reference = tmp_path / "TinyRecursiveModels"
    reference.mkdir()
    out = tmp_path / "acceptance"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--out", str(out), "--peers", str(reference)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    peers = [line for line in done.stdout.splitlines() if "benchmarks/peers.py" in line]
    assert len(peers) == 3
    shapes = ("sudoku-extreme-mlp", "maze-hard-att", "quickstart")
    for shape, line in zip(shapes, peers, strict=True):
        assert f"--reference {reference} --shapes {shape}" in line and "# about" in line
    assert "estimated time on one H100: about" in done.stdout
    assert not out.exists()
    command = [sys.executable, str(BENCHMARKS / "gpu.py"), "--out", str(out)]
    as_json = subprocess.run(
        [*command, "--peers", str(reference), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    document = json.loads(as_json.stdout)
    assert len(document["commands"]) == 10
    assert document["estimated_s_on_one_h100"] <= 9 * 60


def test_peers_names_a_missing_checkout_in_one_line(tmp_path):
    command = [sys.executable, str(BENCHMARKS / "gpu.py"), "--out", str(tmp_path / "a")]
    done = subprocess.run(
        [*command, "--peers", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--peers" in done.stderr and "no such folder" in done.stderr


PEERS_ROW = {
    "stage": "peers sudoku-extreme-mlp",
    "ok": True,
    "detail": "exit 0; peers-sudoku-extreme-mlp.json",
    "batch_size": 256,
    "rows": [
        {"implementation": "trm", "status": "measured", "samples_per_s": 6000.0, "mfu": 0.4},
        {
            "implementation": "official",
            "status": "measured",
            "samples_per_s": 4000.0,
            "mfu": 0.27,
            "trm_over_peer": 1.5,
        },
        {"implementation": "lucidrains", "status": "not installed (pip install x)"},
    ],
}


def test_the_peer_stages_are_written_after_each_and_tabled(gpu, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "quickstart_stage", lambda out: tuple(CANNED["stages"][1:3]))
    shapes = []

    def peers_then_stopped(reference, shape, out):
        shapes.append(shape)
        if len(shapes) == 2:
            raise KeyboardInterrupt
        return {**PEERS_ROW, "stage": f"peers {shape}"}

    monkeypatch.setattr(gpu, "peers_stage", peers_then_stopped)
    args = gpu.argparse.Namespace(
        out=tmp_path,
        skip_bench=True,
        skip_torchrun=True,
        bench_steps=5,
        bench_batch=None,
        peers=tmp_path,
    )
    with pytest.raises(KeyboardInterrupt):
        gpu.acceptance(args, {**CANNED["environment"], "cuda_available": True, "bf16": True})
    saved = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    assert saved["stages"][-1]["stage"] == "peers sudoku-extreme-mlp"
    assert saved["complete"] is False
    row = next(line for line in gpu.markdown(saved).splitlines() if "peers sudoku" in line)
    assert "batch 256: trm 6000.0 samples/s; official 4000.0 samples/s (trm/official 1.50x)" in row
    assert "lucidrains: not installed" in row


def test_a_bench_stage_leads_with_mfu_against_the_datasheet_peak(gpu):
    stage = {
        **CANNED["stages"][3],
        "mfu_datasheet": 0.301,
        "mfu_datasheet_basis": "datasheet dense bf16 peak of the H100 SXM, 989 TFLOP/s",
    }
    document = {**CANNED, "stages": [stage]}
    row = gpu.table_rows(document)[0][2]
    assert row.startswith("MFU 30.1% of the datasheet dense bf16 peak of the H100 SXM")
    assert "MFU 41.2% of 702000 GFLOP/s (bf16)" in row
