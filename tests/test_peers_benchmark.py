"""benchmarks/peers.py and time_to_accuracy.py: the windows alternate trm and each peer, a
peer that is not there is a row that says so, bad input is one line, the tables of canned
documents; with a TinyRecursiveModels checkout named by TRM_REFERENCE_CHECKOUT, the official
model steps on trm's data."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trm.errors import TrmError

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def peers():
    return _load("peers")


@pytest.fixture(scope="module")
def tta():
    return _load("time_to_accuracy")


class _FakePeer:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def step(self) -> float:
        self.calls.append(self.name)
        return 0.0


def test_the_windows_alternate_trm_and_each_peer_after_the_warm_up(peers):
    calls: list[str] = []
    fakes = [_FakePeer("official", calls), _FakePeer("lucidrains", calls)]
    alternator = peers.Alternator(fakes, warmup=2, steps=3, sync=lambda: None)
    alternator.on_train_start()
    for _ in range(2 + 2 * 3):
        calls.append("trm")
        alternator.on_step()
    assert alternator.order == ["trm", "official", "lucidrains"] * 2
    assert calls == (["trm"] * 2) + (["trm"] * 3 + ["official"] * 3 + ["lucidrains"] * 3) * 2
    assert len(alternator.trm_warmup_s) == 2
    assert {k: len(v) for k, v in alternator.windows_s.items()} == {
        "trm": 2,
        "official": 2,
        "lucidrains": 2,
    }


def test_a_peer_not_given_or_not_installed_is_a_row_that_says_so(peers, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tiny_recursive_model", None)  # import fails
    args = peers.argparse.Namespace(peers=["official", "lucidrains"], reference=None)
    missing = peers.peer_rows_unavailable(args)
    assert missing["official"].startswith("not given (--reference PATH")
    assert missing["lucidrains"].startswith("not installed")
    args.reference = tmp_path  # a folder that is no checkout
    assert "not importable" in peers.peer_rows_unavailable(args)["official"]
    args.peers = ["official-fp32"]  # the official code at fp32 needs the same checkout
    assert "not importable" in peers.peer_rows_unavailable(args)["official-fp32"]
    args.reference = None
    assert peers.peer_rows_unavailable(args)["official-fp32"].startswith("not given")


def test_the_peers_and_trms_overrides_are_parsed(peers, tmp_path):
    args = peers.parse_args(["--peers", "official-fp32", "--set", "runtime.compile=on"])
    assert args.peers == ["official-fp32"] and args.set == ["runtime.compile=on"]
    assert peers.parse_args([]).peers == ["official", "lucidrains"]
    with pytest.raises(TrmError, match="unknown official-bf32"):
        peers.parse_args(["--peers", "official-bf32"])


CANNED = {
    "shapes": [
        {
            "shape": "sudoku-extreme-mlp",
            "batch_size": 32,
            "rows": [
                {
                    "implementation": "trm",
                    "status": "measured",
                    "precision": "bf16",
                    "compiled": True,
                    "samples_per_s": 15.9,
                    "gflop_per_sample": 42.7245,
                    "achieved_gflops": 679.3,
                    "mfu": 0.785,
                    "trm_over_peer": None,
                    "window_samples_per_s": [15.0, 16.0],
                },
                {
                    "implementation": "official",
                    "status": "measured",
                    "precision": "bf16",
                    "compiled": True,
                    "samples_per_s": 14.45,
                    "gflop_per_sample": 42.7245,
                    "achieved_gflops": 617.4,
                    "mfu": 0.713,
                    "trm_over_peer": 1.1,
                    "window_samples_per_s": [12.8, 12.0],
                },
                {"implementation": "lucidrains", "status": "not installed (pip install x)"},
            ],
        }
    ]
}


def test_the_table_of_a_canned_document_names_every_row(peers):
    rows = peers.table_rows(CANNED)
    assert rows[0][:3] == ["sudoku-extreme-mlp", "32", "trm"]
    assert rows[0][5:] == ["15.90", "42.724", "679.3", "0.785", "-", "-"]
    assert rows[1][2] == "official" and rows[1][-2:] == ["1.10", "1.25"]
    assert rows[2][2:4] == ["lucidrains", "not installed (pip install x)"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rounds", "0"], "--rounds"),
        (["--warmup", "0"], "--warmup"),
        (["--peers", "nobody"], "--peers: unknown nobody"),
        (["--reference", "/no/such/checkout"], "no such folder"),
        (["--shapes", "no-such-spec"], "no-such-spec"),
    ],
)
def test_peers_rejects_bad_input_in_one_line(args, message, tmp_path):
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peers.py"), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trm: error:") and message in lines[0]
    assert not out.exists()


def test_time_to_accuracy_takes_the_first_evaluation_at_the_threshold(tta):
    curve = [
        {"step": 100, "wall_s": 10.0, "exact_accuracy": 0.5},
        {"step": 200, "wall_s": 20.0, "exact_accuracy": 0.96},
        {"step": 300, "wall_s": 30.0, "exact_accuracy": 0.99},
    ]
    assert tta.first_reaching(curve, 0.95)["step"] == 200
    assert tta.first_reaching(curve, 0.995) is None
    summary = tta.side_summary({"curve": curve}, 0.995)
    assert summary == {
        "time_to_threshold_s": None,
        "step_at_threshold": None,
        "best_exact_accuracy": 0.99,
        "time_to_s": {"0.5": 10.0, "0.8": 20.0, "0.9": 20.0, "0.95": 20.0, "0.97": 30.0},
    }


def test_a_variant_is_a_name_and_its_sets_and_a_threshold_a_fraction(tta):
    assert tta.variant_item("muon:train.optimizer=muon,arch.swiglu_norm=true") == (
        "muon",
        ("train.optimizer=muon", "arch.swiglu_norm=true"),
    )
    for bad in ("muon", "muon:", "mu on:a=b", "muon:train.optimizer"):
        with pytest.raises(TrmError, match="--variant"):
            tta.variant_item(bad)
    assert tta.threshold_item("sudoku9=0.95", ["sudoku9"]) == ("sudoku9", 0.95)
    for bad in ("sudoku9=1.5", "sudoku9=x", "maze=0.9", "sudoku9"):
        with pytest.raises(TrmError, match="--threshold"):
            tta.threshold_item(bad, ["sudoku9"])


def test_a_variant_side_runs_the_spec_with_its_sets_and_the_shared_ones(tta, tmp_path, monkeypatch):
    commands: list[list[str]] = []

    class _FakeRun:
        returncode = 0

        def __init__(self, command, **_):
            commands.append(command)
            run_dir = Path(command[command.index("--out") + 1])
            run_dir.mkdir(parents=True)
            rows = [
                {"step": 100, "wall_s": 12.5},
                {"kind": "eval", "step": 100, "exact_accuracy": 0.97},
            ]
            (run_dir / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(tta.subprocess, "Popen", _FakeRun)
    sets = ("train.max_steps=200", "train.optimizer=muon")
    side = tta.trm_side("quickstart", 60.0, tmp_path, tmp_path / "data", 1, sets, "trm+muon")
    command = commands[0]
    given = [command[i + 1] for i, word in enumerate(command) if word == "--set"]
    assert given == [
        "train.time_budget_s=0",
        f"data.dir={tmp_path / 'data'}",
        "train.max_steps=200",
        "train.optimizer=muon",
        "runtime.threads=1",
    ]
    assert command[command.index("--out") + 1] == str(tmp_path / "trm+muon-quickstart")
    assert side["side"] == "trm+muon" and side["sets"] == list(sets)
    assert side["curve"] == [{"step": 100, "wall_s": 12.5, "exact_accuracy": 0.97}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "muon"], "--variant muon"),
        (["--variant", "a:x=1", "--variant", "a:y=2"], "two variants share a name"),
        (["--official", "official-bf8"], "--official official-bf8"),
        (["--threshold", "quickstart=2"], "--threshold quickstart=2"),
        (["--set", "train.max_steps"], "--set"),
        (["--jobs", "-1"], "--jobs"),
        (["--from-json", "/nonexistent/tta.json"], "--from-json /nonexistent/tta.json"),
    ],
)
def test_time_to_accuracy_rejects_bad_sides_in_one_line(args, message, tmp_path):
    done = subprocess.run(
        [
            *(sys.executable, str(BENCHMARKS / "time_to_accuracy.py"), "--tasks", "quickstart"),
            *("--reference", str(tmp_path), *args),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("trm: error:") and message in lines[0]


def test_time_to_accuracy_needs_a_reference_checkout(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "time_to_accuracy.py"), "--tasks", "quickstart"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.startswith("trm: error: --reference")


def _split(folder, seq_len: int, vocab_size: int = 11) -> None:
    folder.mkdir(parents=True)
    shape = {"seq_len": seq_len, "vocab_size": vocab_size}
    (folder / "dataset.json").write_text(json.dumps(shape))


def test_held_out_puzzles_of_another_set_replace_the_specs_own(tta, tmp_path):
    data, fresh, work = tmp_path / "data", tmp_path / "fresh", tmp_path / "work"
    _split(data / "train", 81)
    _split(data / "test", 81)
    (data / "identifiers.json").write_text('["<blank>"]')
    _split(fresh / "test", 81)
    work.mkdir()
    scored = tta.with_held_out("sudoku9", data, fresh, work)
    assert (scored / "train").resolve() == (data / "train").resolve()
    assert (scored / "test").resolve() == (fresh / "test").resolve()
    assert (scored / "identifiers.json").read_text() == '["<blank>"]'
    other = tmp_path / "other"
    _split(other / "test", 16)
    with pytest.raises(TrmError, match="seq_len 16 against 81"):
        tta.with_held_out("sudoku9", data, other, tmp_path / "work2")
    (other / "test" / "dataset.json").write_text("{not json")
    with pytest.raises(TrmError, match=r"unreadable dataset\.json"):
        tta.with_held_out("sudoku9", data, other, tmp_path / "work3")


@pytest.mark.parametrize("item", ["sudoku9", "maze=/tmp", "sudoku9=/nonexistent-folder"])
def test_time_to_accuracy_rejects_a_bad_held_out_in_one_line(item, tmp_path):
    done = subprocess.run(
        [
            *(sys.executable, str(BENCHMARKS / "time_to_accuracy.py"), "--tasks", "sudoku9"),
            *("--reference", str(tmp_path), "--held-out", item),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1
    assert lines[0].startswith("trm: error: --held-out")


REFERENCE = os.environ.get("TRM_REFERENCE_CHECKOUT")


@pytest.mark.skipif(not REFERENCE, reason="TRM_REFERENCE_CHECKOUT names no checkout")
def test_the_official_model_trains_a_step_on_trms_quickstart_data(tmp_path, monkeypatch):
    pytest.importorskip("pydantic")
    pytest.importorskip("einops")
    _load("peers")  # puts benchmarks/ on sys.path
    from peer_steps import Batches, official_step

    from trm.data.shape import read_shape
    from trm.plan.dataset import ensure_dataset
    from trm.plugin_manager import load_plugins
    from trm.spec import load_spec, resolve_spec_path

    monkeypatch.setenv("DISABLE_COMPILE", "1")
    spec = load_spec(resolve_spec_path("quickstart"))
    pm = load_plugins([])
    from trm.measure.loop_timing import small_data_spec

    data_dir = ensure_dataset(pm, small_data_spec(spec, pm, 8), tmp_path, lambda line: None)
    shape = read_shape(data_dir, "train")
    peer = official_step(Path(REFERENCE), spec, shape, Batches(spec, data_dir, 8, "cpu"), "cpu", 4)
    losses = [peer.step() for _ in range(2)]
    assert all(loss > 0 for loss in losses) and not peer.compiled
    assert peer.batch_size == 8 and peer.ema is not None
    assert any("AdamW in place of the official AdamATan2" in n for n in peer.notes)
    json.dumps(losses)
    fp32 = official_step(
        Path(REFERENCE), spec, shape, Batches(spec, data_dir, 8, "cpu"), "cpu", 4,
        forward_dtype="float32",
    )  # fmt: skip
    assert fp32.name == "official-fp32" and fp32.precision == "fp32" and fp32.step() > 0


def test_lever_cost_compares_each_lever_with_the_baseline(tmp_path):
    lever_cost = _load("lever_cost")
    memory = {"total_mib": 800.0, "optimizer states": 1.0, "activations": 300.0}
    memory["carry (z_H, z_L)"] = 1.0
    document = {
        "levers": {
            "baseline": {"sets": [], "step_s": 0.5, "memory": memory},
            "wta4": {
                "sets": ["train.latent_candidates=4"],
                "step_s": 2.0,
                "memory": {**memory, "activations": 1200.0},
            },
        }
    }
    rows = lever_cost.table_rows(document)
    assert rows[0][:4] == ["baseline", "-", "0.500", "1.00"]
    assert rows[1][:4] == ["wta4", "train.latent_candidates=4", "2.000", "4.00"]
    assert rows[1][6] == "1200.00"
    assert set(lever_cost.LEVERS["all"]) == {
        *lever_cost.LEVERS["muon_swiglu"],
        *lever_cost.LEVERS["wta4"],
    }
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "lever_cost.py"), "--rounds", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.startswith("trm: error: --rounds")
    (tmp_path / "list.json").write_text("[]")
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "lever_cost.py"), "--from-json", tmp_path / "list.json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "not a JSON object" in lines[0]


class _Event:
    """A profiler row as ``key_averages(group_by_input_shape=True)`` gives it."""

    def __init__(self, key, self_us, count=1, shapes=None, total_us=None):
        self.key, self.self_cpu_time_total, self.count = key, self_us, count
        self.input_shapes = shapes or []
        self.cpu_time_total = total_us if total_us is not None else self_us


def test_the_peer_profile_marks_the_products_both_sides_make_alike():
    profile = _load("peer_profile")
    assert profile.product_key("aten::mm", [[544, 64], [64, 512], [544, 512]]) == "544x64x512"
    addmm = [[512, 17], [512, 2048], [2048, 17], [], [], [512, 17]]
    assert profile.product_key("aten::addmm", addmm) == "512x2048x17"
    assert profile.product_key("aten::bmm", [[4, 2, 3], [4, 3, 5]]) is None
    steps = 2
    trm = profile.summarise(
        [
            _Event("aten::mm", 6000, 4, [[544, 64], [64, 512], [544, 512]]),  # 2 a step
            _Event("aten::mm", 1000, 2, [[8, 8], [8, 8], [8, 8]]),  # trm's alone
            _Event("## Call CompiledFxGraph abc", 2000, 4),
            _Event("Optimizer.step#AdamATan2.step", 100, 2, total_us=400),
            _Event("aten::add_", 1000, 2),
        ],
        steps,
    )
    official = profile.summarise(
        [
            _Event("aten::addmm", 4000, 4, [[544, 512], [544, 64], [64, 512]]),
            _Event("## Call CompiledFxGraph def", 3000, 2),
        ],
        steps,
    )
    profile.compare(trm, official)
    assert trm["shared_product_shapes"] == official["shared_product_shapes"] == ["544x64x512"]
    assert trm["self_ms_per_step"] == pytest.approx(5.05)  # 10,100 us over 2 steps
    assert trm["shared_products_share"] == pytest.approx(3.0 / 5.05)
    assert official["shared_products_share"] == pytest.approx(2.0 / 3.5)
    assert trm["graph_calls_per_step"] == 2 and official["graph_calls_per_step"] == 1
    groups = trm["group_ms_per_step"]
    assert groups["optimizer_and_ema"] == pytest.approx(0.2)
    assert groups["matrix_products"] == pytest.approx(3.5)
    rows = profile.table_rows({"sides": {"trm": trm, "official-fp32": official}})
    assert [r[0] for r in rows] == ["trm", "official-fp32"] and rows[0][3] == "59.4%"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--reference", "/no/such/checkout"], "TinyRecursiveModels checkout"),
        (["--from-json", "/no/such/file.json"], "cannot read it"),
    ],
)
def test_the_peer_profile_rejects_bad_input_in_one_line(args, message):
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "peer_profile.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("trm: error:") and message in lines[0]


def test_the_saved_peer_profile_prints_its_table(capsys):
    profile = _load("peer_profile")
    saved = BENCHMARKS / "results" / "peer-profile-quickstart-epyc-zen3-shared.json"
    assert profile.main(["--from-json", str(saved), "--markdown"]) == 0
    table = capsys.readouterr().out
    assert "| trm |" in table and "| official-fp32 |" in table
