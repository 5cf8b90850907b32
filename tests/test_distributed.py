"""Data parallel under torchrun: 2 ranks train what one process trains, and survive failures.

The end-to-end tests run ``python -m torch.distributed.run --nproc-per-node 2 -m trm run`` on
the tiny spec (global batch 8, 20 steps, gloo on this CPU) as real subprocesses, and compare
with ``trm run`` as one process:

- the same examples, the same halting, the same evaluation, and final weights within
  ``MAX_RELATIVE_DIFFERENCE`` (float32 sums in another order: measured 1.7e-6 on this CPU);
- one rank killed by SIGKILL mid-run under ``--max-restarts 1``: torchrun restarts the job,
  it resumes from its last checkpoint and ends bit-identical to an uninterrupted 2-rank run;
- SIGTERM reaching one rank stops both after the same step with one checkpoint, from which
  the run resumes bit-identical;
- resuming a 2-rank checkpoint in one process keeps the global carry and says so.

The fast tests check the pieces alone: the rows and shards of each rank, the puzzle-embedding
gather, the distributed plugin's per-rank plan, the estimator's per-rank rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.tiny_run import build_tiny_data, events, metrics, summary, write_spec
from trm.cli.main import main
from trm.device import distributed
from trm.device.distributed import World
from trm.errors import TrmError
from trm.model import SignSGDSparse, SparsePuzzleEmbedding

# Every test here starts torchrun ranks: slow, so run first under pytest -n.
pytestmark = pytest.mark.slow

STEPS = 20
MAX_RELATIVE_DIFFERENCE = 1e-5
PROCESS_TIMEOUT_S = 240.0
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")


# ------------------------------------------------------------------------- end to end


def _spec(folder: Path, data: Path) -> Path:
    return write_spec(
        folder,
        data,
        micro=8,
        max_steps=STEPS,
        eval_interval=10,
        eval_max_examples=16,
        checkpoint_interval_steps=5,
    )


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("TRM_") and k not in TORCHRUN_ENV
    }
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def torchrun(
    spec: Path, run_dir: Path, *extra: str, restarts: int = 0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 -m trm run SPEC --out RUN_DIR EXTRA…``."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "--max-restarts", str(restarts)]
    command += ["-m", "trm", "run", str(spec), "--out", str(run_dir), *extra]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or _clean_env(),
        start_new_session=True,  # torchrun and its workers: one group to kill on a timeout
    )
    try:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"torchrun did not end within {PROCESS_TIMEOUT_S:.0f} s: {err[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny spec trained once by one process and once by 2 ranks under torchrun."""
    root = tmp_path_factory.mktemp("distributed")
    data = build_tiny_data(root / "data")
    spec = _spec(root, data)
    assert main(["run", str(spec), "--out", str(root / "one")]) == 0
    done = torchrun(spec, root / "two")
    assert done.returncode == 0, done.stderr[-3000:]
    return {"spec": spec, "data": data, "one": root / "one", "two": root / "two"}


def _final(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{STEPS:08d}.pt", weights_only=True)


def max_relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """max over tensors of max|a - b| / max|b|."""
    worst = 0.0
    for key in b:
        scale = max(float(b[key].abs().max()), 1e-30)
        worst = max(worst, float((a[key].float() - b[key].float()).abs().max()) / scale)
    return worst


def test_two_ranks_train_what_one_process_trains(runs: dict[str, Path]) -> None:
    one, two = _final(runs["one"]), _final(runs["two"])
    assert max_relative_difference(two["model"], one["model"]) <= MAX_RELATIVE_DIFFERENCE
    # the same examples: the carry holds the rows each slot was reading, in global order
    for key in ("data.inputs", "data.labels", "data.puzzle_identifiers", "halted", "steps"):
        assert torch.equal(two["carry"][key], one["carry"][key]), key
    rows_one = [r for r in metrics(runs["one"]) if "kind" not in r]
    rows_two = [r for r in metrics(runs["two"]) if "kind" not in r]
    assert [r["samples"] for r in rows_two] == [r["samples"] for r in rows_one]
    assert [r["halted"] for r in rows_two] == [r["halted"] for r in rows_one]
    for a, b in zip(rows_two, rows_one, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    evals_one = [r for r in metrics(runs["one"]) if r.get("kind") == "eval"]
    evals_two = [r for r in metrics(runs["two"]) if r.get("kind") == "eval"]
    assert [r["examples"] for r in evals_two] == [r["examples"] for r in evals_one] == [16, 16]
    for a, b in zip(evals_two, evals_one, strict=True):
        assert a["exact_accuracy"] == b["exact_accuracy"]
        assert a["cell_accuracy"] == pytest.approx(b["cell_accuracy"], abs=1e-9)
    s = summary(runs["two"])
    assert s["world_size"] == 2 and s["ranks_agree"] is True
    assert two["world_size"] == 2 and len(two["ranks"]) == 2
    assert all("collective_s" in r for r in rows_two)


def test_two_ranks_recomputing_activations_train_what_one_process_trains(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Activation checkpointing composes with data parallelism: each rank recomputes its own
    micro-batches' activations, the gradient all-reduce is unchanged."""
    on = ("--set", "runtime.activation_checkpointing=on")
    done = torchrun(runs["spec"], tmp_path / "two-on", *on)
    assert done.returncode == 0, done.stderr[-3000:]
    two_on, one = _final(tmp_path / "two-on"), _final(runs["one"])
    assert two_on["activation_checkpointing"] is True
    assert max_relative_difference(two_on["model"], one["model"]) <= MAX_RELATIVE_DIFFERENCE


def test_only_rank_zero_writes_the_run_files(runs: dict[str, Path]) -> None:
    steps = [r["step"] for r in metrics(runs["two"]) if "kind" not in r]
    assert steps == list(range(1, STEPS + 1))  # one row a step, not one per rank
    folder = runs["two"] / "checkpoints"
    assert sorted(p.name for p in folder.glob("step-*.pt")) == [
        f"step-{s:08d}.pt" for s in (10, 15, 20)
    ]
    assert not list(folder.glob(".*.tmp"))


def test_a_killed_rank_is_restarted_and_the_run_ends_bit_identical(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    env = _clean_env(TRM_FAULTS="kill@7", TRM_FAULTS_RANKS="1")
    done = torchrun(runs["spec"], tmp_path / "run", "--plugins", "faults", restarts=1, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "a collective with the other ranks failed" in done.stderr  # rank 0 did not hang
    assert "resumed from step 5" in done.stderr
    s = summary(tmp_path / "run")
    assert s["stopped"] == "finished" and s["steps"] == STEPS
    assert s["final_weights_sha256"] == summary(runs["two"])["final_weights_sha256"]
    steps = [r["step"] for r in metrics(tmp_path / "run") if "kind" not in r]
    assert steps == list(range(1, STEPS + 1))


def test_sigterm_on_one_rank_stops_both_after_the_same_step_and_resumes_exactly(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    env = _clean_env(TRM_FAULTS="sigterm@6", TRM_FAULTS_RANKS="1")
    stopped = torchrun(runs["spec"], run_dir, "--plugins", "faults", env=env)
    assert stopped.returncode != 0  # each rank exits 130, torchrun reports the stop
    s = summary(run_dir)
    assert (s["stopped"], s["steps"], s["checkpoint_step"]) == ("terminated", 6, 6)
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*.pt"))[-1] == (
        "step-00000006.pt"
    )
    assert "resume with: torchrun --nproc-per-node=2 -m trm run" in stopped.stderr
    resumed = torchrun(runs["spec"], run_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    uninterrupted = summary(runs["two"])["final_weights_sha256"]
    assert summary(run_dir)["final_weights_sha256"] == uninterrupted


def test_one_process_resumes_a_two_rank_checkpoint_and_says_the_world_changed(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    source = runs["two"] / "checkpoints" / "step-00000010.pt"
    (run_dir / "checkpoints" / source.name).write_bytes(source.read_bytes())
    assert main(["run", str(runs["spec"]), "--out", str(run_dir)]) == 0
    assert "written by 2 process(es), this run has 1" in capsys.readouterr().err
    (event,) = events(run_dir, "world_size_changed")
    assert event["step"] == 10 and event["world_size"] == 1
    # the carry is the global one, so the continuation is the same run up to rounding
    resumed, uninterrupted = _final(run_dir), _final(runs["one"])
    assert max_relative_difference(resumed["model"], uninterrupted["model"]) <= 1e-5


def test_a_spec_missing_on_one_rank_is_named_once(tmp_path: Path) -> None:
    """Rank 1 is given a spec file that does not exist, rank 0 a good one: one error line,
    from rank 0, naming the missing file; no collective failure, no run folder."""
    data = build_tiny_data(tmp_path / "data")
    spec = _spec(tmp_path, data)
    run_dir = tmp_path / "run"
    wrapper = tmp_path / "rank.sh"
    wrapper.write_text(
        f"#!/bin/sh\nspec={spec}\n"
        f'[ "$RANK" = 0 ] || spec={tmp_path / "nope.toml"}\n'
        f'exec {sys.executable} -m trm run "$spec" --out {run_dir}\n'
    )
    wrapper.chmod(0o755)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "--max-restarts", "0", "--no-python", str(wrapper)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=_clean_env(TRM_COLLECTIVE_TIMEOUT_S="60"),
        timeout=PROCESS_TIMEOUT_S,
    )
    lines = [ln for ln in done.stderr.splitlines() if "trm: error:" in ln]
    assert done.returncode != 0
    assert len(lines) == 1, done.stderr[-3000:]
    assert "nope.toml" in lines[0] and "rank 1" in lines[0], lines[0]
    assert "collective" not in done.stderr  # (torchrun's own report of failed ranks follows)
    assert not run_dir.exists()


# ------------------------------------------------------------------------- the pieces


@given(st.integers(0, 1000), st.integers(1, 16))
def test_the_ranks_shards_cover_every_example_once(total: int, size: int) -> None:
    shards = [World(rank, size).shard(total) for rank in range(size)]
    covered = [i for shard in shards for i in shard]
    assert covered == list(range(total))
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_each_rank_reads_its_contiguous_rows_of_the_global_batch() -> None:
    rows = [World(rank, 4).rows(12) for rank in range(4)]
    assert rows == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 12)]
    with pytest.raises(TrmError, match="does not divide among 2 processes"):
        World(1, 2).rows(9)


def test_one_process_collectives_are_the_identity() -> None:
    assert not distributed.active()
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.gather_to_first(3) == [3]
    assert distributed.broadcast_from_first("x") == "x"
    assert distributed.all_reduce_sums([1.0, 2.0]) == [1.0, 2.0]
    assert distributed.current() == World()


def test_gathered_lookups_give_every_rank_the_one_process_update() -> None:
    """Two ranks' halves of a batch, gathered, update the table as the whole batch does."""
    torch.manual_seed(0)
    ids = torch.tensor([3, 1, 3, 0, 2, 1, 3, 2])
    grads = torch.randn(8, 4)

    def table_after(parts: list[tuple[torch.Tensor, torch.Tensor]], gather) -> torch.Tensor:
        emb = SparsePuzzleEmbedding(5, 4, init_std=1.0)
        torch.manual_seed(1)
        emb.weights.copy_(torch.randn(5, 4))
        opt = SignSGDSparse(emb, lr=0.1, weight_decay=0.5)
        opt.gather_lookups = gather
        for part_ids, part_grads in parts:
            local = torch.zeros(len(part_ids), 4, requires_grad=True)
            local.grad = part_grads.clone()
            emb.pending.append((part_ids, local))
        opt.step()
        return emb.weights.clone()

    whole = table_after([(ids, grads)], None)
    rank0 = (ids[:4], grads[:4])

    def gather_both(local_ids: torch.Tensor, local_grads: torch.Tensor):
        return torch.cat([local_ids, ids[4:]]), torch.cat([local_grads, grads[4:]])

    assert torch.equal(table_after([rank0], gather_both), whole)


def _torchrun_env(monkeypatch: pytest.MonkeyPatch, local_size: int = 2) -> None:
    for name, value in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_size))


def test_a_rank_plans_with_its_share_of_the_nodes_cores_and_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trm.hardware import HardwareProfile
    from trm.plugins.operations.distributed import rank_share

    node = HardwareProfile(physical_cores=8, logical_cores=16, memory_budget_bytes=16 * 2**30)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    share = rank_share(node, World(1, 4, 1, 2))  # 2 ranks on this node, 4 in all
    assert (share.physical_cores, share.memory_budget_bytes) == (4, 8 * 2**30)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert rank_share(node, World(1, 4, 1, 2)).physical_cores == 3


def test_under_torchrun_the_plugin_is_on_and_its_share_wins_the_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trm.plan.pipeline import detect_hardware
    from trm.plugin_manager import load_plugins

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    whole = detect_hardware(load_plugins())
    _torchrun_env(monkeypatch)
    pm = load_plugins()
    assert "distributed" in pm.enabled_names()
    share = detect_hardware(pm)
    assert share.physical_cores == max(1, (whole.physical_cores or 1) // 2)
    assert share.memory_total_bytes == whole.memory_total_bytes  # facts of the node stay


def test_the_distributed_plugin_is_off_without_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    from trm.plugin_manager import load_plugins

    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    assert "distributed" not in load_plugins().enabled_names()
    with pytest.raises(TrmError, match="not started by torchrun"):
        load_plugins(["distributed"])


def test_the_estimate_counts_this_ranks_rows_of_the_carry() -> None:
    from trm.data.shape import DatasetShape
    from trm.plugins.planning.memory_estimator import estimate_items
    from trm.runtime import RuntimeChoice
    from trm.spec import load_spec, resolve_spec_path

    spec = load_spec(resolve_spec_path("sudoku-extreme-mlp"))
    shape = DatasetShape(seq_len=81, vocab_size=11, num_puzzle_identifiers=10, total_groups=10)
    runtime = RuntimeChoice(device="cpu", precision="fp32", threads=1, compile=False)

    def carry_bytes(world_size: int) -> int:
        items = estimate_items(spec, _hardware(), runtime, shape, 0, world_size=world_size)
        return next(i.bytes for i in items if i.name == "carry (z_H, z_L)")

    assert carry_bytes(2) * 2 == carry_bytes(1)


def _hardware():
    from trm.hardware import HardwareProfile

    return HardwareProfile(memory_budget_bytes=8 * 2**30)
