"""trm analyze and trm estimate end to end: profile, tiers, generated specs, JSON, exit codes."""

from __future__ import annotations

import json

import pytest

from trm.spec import load_spec

TINY = """
name = "tiny"
[arch]
hidden_size = 32
num_heads = 2
H_cycles = 2
L_cycles = 2
pos_encodings = "none"
mlp_t = true
puzzle_emb_ndim = 0
puzzle_emb_len = 1
halt_max_steps = 2
[train]
global_batch_size = 8
max_steps = 2
[data]
source = "sudoku"
[data.generate]
size = 4
count = 40
test_count = 8
clues = 8
[runtime]
device = "cpu"
compile = "off"
"""


@pytest.fixture
def tiny_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("TRM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_estimate_json_has_the_stable_fields_and_items_sum_to_totals(cli, tiny_spec):
    result = cli("estimate", tiny_spec, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    for key in ("host_total_bytes", "device_total_bytes", "budget_bytes", "fits", "items"):
        assert key in doc
    host = sum(i["bytes"] for i in doc["items"] if i["location"] == "host")
    assert host == doc["host_total_bytes"] and doc["device_total_bytes"] == 0
    names = {i["name"] for i in doc["items"]}
    assert {"weights", "activations", "optimizer states", "EMA copy", "carry (z_H, z_L)"} <= names
    assert doc["fits"] is True


def test_estimate_exits_1_when_the_run_does_not_fit(cli, tiny_spec):
    result = cli("estimate", tiny_spec, "--set", "train.global_batch_size=4000000")
    assert result.code == 1
    assert "DOES NOT FIT" in result.out


def test_estimate_with_a_mode_fits_the_tier_and_reports_its_changes(cli, tiny_spec):
    result = cli("estimate", tiny_spec, "--mode", "conservative", "--json")
    doc = json.loads(result.out)
    assert result.code == 0 and doc["target_fraction"] == 0.5
    assert any(c["key"] == "runtime.micro_batch_size" for c in doc["changes"])


def test_analyze_prints_profile_score_tiers_and_warnings(cli, tiny_spec):
    result = cli("analyze", tiny_spec)
    assert result.code == 0, result.err
    for text in (
        "Hardware profile",
        "Performance score",
        "conservative",
        "balanced",
        "extreme",
        "Warnings",
        "swap",
    ):
        assert text in result.out


def test_analyze_profile_only_json_is_one_document(cli, tiny_spec):
    result = cli("analyze", "--profile-only", "--json")
    doc = json.loads(result.out)
    assert doc["profile"]["memory_budget_bytes"] > 0
    assert "tiers" not in doc and doc["performance_meaning"]


def test_generated_configs_run_unchanged_with_trm_run(cli, tiny_spec, tmp_path):
    result = cli("analyze", tiny_spec, "--generate-configs", tmp_path / "gen", "--json")
    doc = json.loads(result.out)
    assert [t["mode"] for t in doc["tiers"]] == ["conservative", "balanced", "extreme"]
    paths = doc["generated_configs"]
    assert len(paths) == 3
    for path in paths:
        spec = load_spec(tmp_path / "gen" / path.split("/")[-1])
        assert spec.runtime.micro_batch_size >= 1
    run = cli(
        "run", paths[0], "--mode", "conservative", "--max-steps", "1", "--out", tmp_path / "run"
    )
    assert run.code == 0, run.err
    changes = json.loads((tmp_path / "run" / "adaptations.json").read_text())
    assert changes == []  # the generated spec already fits its tier: nothing left to change


def test_bad_spec_is_a_one_line_usage_error(cli, tmp_path):
    result = cli("estimate", tmp_path / "missing.toml")
    assert result.code == 2 and result.err.startswith("trm: error:")
