"""An optimizer is a plugin: ``train.optimizer`` names whatever the installed plugins offer.

An out-of-tree package (tests/fixtures/trm_sgd_optimizer, registered under the
``trm.plugins`` entry-point group and installed with pip into a folder of its own, as the
out-of-tree backend test does) is chosen by ``train.optimizer`` with no change to trm; Lion
(the built-in ``lion`` plugin on lion-pytorch) trains and resumes bit-identically after a
SIGKILL; an unknown name and a missing package are one error line each; the memory estimate
counts the chosen optimizer's state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import trm
from tests.conftest import assert_one_line_error
from tests.out_of_tree import pip_install_target
from tests.tiny_run import (
    GLOBAL_BATCH,
    TOTAL_STEPS,
    build_tiny_data,
    checkpoint_steps,
    eval_steps,
    run_here,
    summary,
    train_steps,
    write_spec,
)
from trm.data.shape import DatasetShape
from trm.hardware import HardwareProfile
from trm.model import DenseOptimizer, choose_dense_optimizer
from trm.model.optim import ADAM_ATAN2
from trm.plugins.optimizers import lion as lion_plugin
from trm.plugins.planning import memory_estimator
from trm.runtime import RuntimeChoice
from trm.spec import load_spec, resolve_spec_path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "fixtures" / "trm_sgd_optimizer"
PROCESS_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment of a process that has trm-sgd-optimizer installed."""
    site = pip_install_target(PACKAGE, tmp_path_factory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _start(env: dict[str, str], spec: Path, run_dir: Path, name: str) -> subprocess.Popen:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}-{name}.log"
    return subprocess.Popen(
        [sys.executable, "-m", "trm", "run", str(spec), "--out", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        env=env,
        start_new_session=True,
    )


def _finish(process: subprocess.Popen) -> int:
    try:
        process.wait(timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode


def _train_rows(run_dir: Path) -> int:
    try:
        return (run_dir / "metrics.jsonl").read_text().count('"samples_per_s"')
    except OSError:
        return 0


def _kill_mid_run(env: dict[str, str], spec: Path, run_dir: Path) -> int:
    """SIGKILL a run once it has logged three steps; its exit code."""
    process = _start(env, spec, run_dir, "kill")
    while process.poll() is None:
        if _train_rows(run_dir) >= 3:
            os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.001)
    return _finish(process)


def _kill_mid_run_then_resume(env: dict[str, str], spec: Path, run_dir: Path) -> list[int]:
    """SIGKILL a run once it has logged three steps, then run the same command again."""
    killed = _kill_mid_run(env, spec, run_dir)
    return [killed, _finish(_start(env, spec, run_dir, "resume"))]


def _run_here(spec: Path, run_dir: Path, name: str) -> int:
    """The run in this process (tests.tiny_run.run_here), with the log a subprocess writes."""
    code, _ = run_here(spec, run_dir, run_dir.parent / f"{run_dir.name}-{name}.log")
    return code


@pytest.fixture(scope="module")
def runs(tmp_path_factory, installed) -> tuple[Path, dict[str, list[int]]]:
    """For Lion and the out-of-tree SGD: an uninterrupted tiny run and one killed mid-run and
    resumed. Returns the base folder and each run's exit codes.

    The SGD runs are subprocesses (the plugin is installed for them alone), side by side in
    threads, as is Lion's killed run; Lion's uninterrupted run and its resume (the built-in
    plugin) run meanwhile in this process, in the main thread (tests.tiny_run.run_here)."""
    base = tmp_path_factory.mktemp("optimizers")
    data = build_tiny_data(base / "data")
    lion = write_spec(base / "lion", data, optimizer="lion", lr=3e-4, weight_decay=0.3)
    sgd = write_spec(base / "sgd", data, optimizer="sgd_momentum", lr=0.05)
    with ThreadPoolExecutor(max_workers=3) as pool:
        sgd_reference = pool.submit(_finish, _start(installed, sgd, base / "sgd-reference", "run"))
        sgd_resumed = pool.submit(_kill_mid_run_then_resume, installed, sgd, base / "sgd-resumed")
        lion_killed = pool.submit(_kill_mid_run, installed, lion, base / "lion-resumed")
        codes = {"lion-reference": [_run_here(lion, base / "lion-reference", "run")]}
        killed = lion_killed.result()
        codes["lion-resumed"] = [killed, _run_here(lion, base / "lion-resumed", "resume")]
        codes["sgd-reference"] = [sgd_reference.result()]
        codes["sgd-resumed"] = sgd_resumed.result()
    return base, codes


def _dense_state(run_dir: Path) -> dict:
    """The dense optimizer's state dict in the run's newest checkpoint."""
    newest = max(checkpoint_steps(run_dir))
    path = run_dir / "checkpoints" / f"step-{newest:08d}.pt"
    payload = torch.load(path, weights_only=True, map_location="cpu")
    return payload["optimizers"][-1]


def _assert_resumed_bit_identical(base: Path, name: str, codes: dict[str, list[int]]) -> None:
    assert codes[f"{name}-reference"] == [0]
    killed, resumed = codes[f"{name}-resumed"]
    assert killed == -signal.SIGKILL and resumed == 0
    reference, run_dir = base / f"{name}-reference", base / f"{name}-resumed"
    assert "resumed from step" in (base / f"{name}-resumed-resume.log").read_text()
    got, want = summary(run_dir), summary(reference)
    assert got["final_weights_sha256"] == want["final_weights_sha256"]
    assert (got["steps"], got["samples"]) == (TOTAL_STEPS, TOTAL_STEPS * GLOBAL_BATCH)
    assert train_steps(run_dir) == list(range(1, TOTAL_STEPS + 1))
    assert eval_steps(run_dir) == eval_steps(reference)


@pytest.mark.slow
def test_an_installed_optimizer_plugin_is_chosen_by_train_optimizer_and_trains(runs, installed):
    base, codes = runs
    assert codes["sgd-reference"] == [0]
    assert summary(base / "sgd-reference")["steps"] == TOTAL_STEPS
    state = _dense_state(base / "sgd-reference")
    # torch's SGD keeps one momentum buffer per parameter: the plugin's optimizer trained
    assert state["state"] and all(set(s) == {"momentum_buffer"} for s in state["state"].values())
    assert state["param_groups"][0]["momentum"] == 0.9
    listed = subprocess.run(
        [sys.executable, "-m", "trm", "plugins", "--json"],
        env=installed,
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"dense_optimizers"' in listed.stdout and "sgd-optimizer" in listed.stdout


@pytest.mark.slow
def test_an_installed_optimizer_plugin_resumes_bit_identical_after_a_sigkill(runs):
    base, codes = runs
    _assert_resumed_bit_identical(base, "sgd", codes)


@pytest.mark.slow
def test_lion_trains_a_tiny_run_keeping_one_moment_per_parameter(runs):
    base, codes = runs
    assert codes["lion-reference"] == [0]
    done = summary(base / "lion-reference")
    assert done["steps"] == TOTAL_STEPS
    state = _dense_state(base / "lion-reference")
    assert state["state"] and all(set(s) == {"exp_avg"} for s in state["state"].values())
    assert state["param_groups"][0]["betas"] == (0.9, 0.95)
    assert state["param_groups"][0]["weight_decay"] == 0.3


@pytest.mark.slow
def test_lion_killed_mid_run_resumes_bit_identical(runs):
    base, codes = runs
    _assert_resumed_bit_identical(base, "lion", codes)


# ------------------------------------------------------------------------- bad names


def test_an_unknown_optimizer_is_one_line_naming_the_available_ones(cli, tmp_path):
    run_dir = tmp_path / "run"
    result = cli("run", "quickstart", "--set", "train.optimizer=x", "--out", run_dir)
    assert_one_line_error(
        result,
        "train.optimizer: unknown optimizer 'x'; available: adam_atan2, adamw, lion",
    )
    assert not run_dir.exists()
    with pytest.raises(trm.TrmError, match="unknown optimizer 'x'; available: adam_atan2"):
        trm.train("quickstart", out=tmp_path / "api", overrides=["train.optimizer=x"])
    assert not (tmp_path / "api").exists()


def test_an_optimizer_whose_package_is_missing_names_the_extra_to_install(
    cli, tmp_path, monkeypatch
):
    monkeypatch.setattr(lion_plugin, "PACKAGE", "lion_pytorch_is_not_installed_here")
    run_dir = tmp_path / "run"
    result = cli("run", "quickstart", "--set", "train.optimizer=lion", "--out", run_dir)
    assert_one_line_error(
        result, "train.optimizer: 'lion'", "lion-pytorch", "pip install 'trm[lion]'"
    )
    assert not run_dir.exists()
    assert cli("estimate", "quickstart").code == 0  # a spec that does not name it is untouched


def test_a_name_two_plugins_offer_is_refused():
    other = DenseOptimizer("adam_atan2", ADAM_ATAN2.build, 8)
    with pytest.raises(trm.TrmError, match="2 plugins offer an optimizer called 'adam_atan2'"):
        choose_dense_optimizer([ADAM_ATAN2, other], "adam_atan2")


# ------------------------------------------------------------------------- memory


def test_the_memory_estimate_of_lion_is_one_moment_below_adam_atan2s():
    spec = load_spec(resolve_spec_path("quickstart"))
    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    runtime = RuntimeChoice("cpu", "fp32", 2, False)
    lion = next(e for e in lion_plugin.dense_optimizers() if e.name == "lion")

    def items(optimizer: DenseOptimizer) -> dict[str, int]:
        found = memory_estimator.estimate_items(
            spec, HardwareProfile(), runtime, shape, process_baseline_bytes=0, optimizer=optimizer
        )
        return {item.name: item.bytes for item in found}

    adam, lion_items = items(ADAM_ATAN2), items(lion)
    params = memory_estimator.model_sizes(spec.arch, shape).params
    one_moment_bytes = 4 * params  # one float32 per parameter element
    assert adam["optimizer states"] == 2 * one_moment_bytes
    assert lion_items["optimizer states"] == one_moment_bytes
    assert sum(adam.values()) - sum(lion_items.values()) == one_moment_bytes


# ------------------------------------------------------------------ a plugin's wrong answers


def _sgd(params: list[torch.nn.Parameter], train) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=train.lr)


class _NoZeroGrad:
    """What a careless build might return: param groups, but none of the methods."""

    param_groups: list = [{}]  # noqa: RUF012


def _raise(exc: Exception):
    raise exc


# (case, what the hook answers, fragments of the one error line)
WRONG_ANSWERS = [
    (
        "hook-raises",
        lambda: _raise(RuntimeError("boom")),
        ["plugin 'Mine' failed in dense_optimizers: RuntimeError: boom"],
    ),
    ("an-int", lambda: 3, ["plugin 'Mine' answered dense_optimizers with 3"]),
    ("a-text", lambda: "mine", ["plugin 'Mine' answered dense_optimizers with 'mine'"]),
    ("a-dict", lambda: {"mine": 1}, ["plugin 'Mine' answered dense_optimizers with {'mine': 1}"]),
    ("a-list-of-junk", lambda: [1, "x"], ["plugin 'Mine'", "1 is not a trm.model.DenseOptimizer"]),
    (
        "build-raises",
        lambda: [DenseOptimizer("mine", lambda p, t: 1 / 0, 4)],
        ["optimizer 'mine' (plugin 'Mine')", "build raised ZeroDivisionError"],
    ),
    (
        "build-answers-none",
        lambda: [DenseOptimizer("mine", lambda p, t: None, 4)],
        ["optimizer 'mine' (plugin 'Mine')", "build answered None", "torch.optim.Optimizer"],
    ),
    (
        "build-answers-a-text",
        lambda: [DenseOptimizer("mine", lambda p, t: "sgd", 4)],
        ["optimizer 'mine' (plugin 'Mine')", "build answered 'sgd'"],
    ),
    (
        "build-not-callable",
        lambda: [DenseOptimizer("mine", "sgd", 4)],
        ["plugin 'Mine'", "entry 'mine': its build 'sgd' is not callable"],
    ),
    (
        "state-size-a-text",
        lambda: [DenseOptimizer("mine", _sgd, "four")],
        ["plugin 'Mine'", "state_bytes_per_element 'four' is not a whole number"],
    ),
    (
        "state-size-negative",
        lambda: [DenseOptimizer("mine", _sgd, -4)],
        ["plugin 'Mine'", "state_bytes_per_element -4 is not a whole number"],
    ),
    (
        "no-zero-grad",
        lambda: [DenseOptimizer("mine", lambda p, t: _NoZeroGrad(), 4)],
        ["optimizer 'mine' (plugin 'Mine')", "which has no zero_grad, step"],
    ),
]


def _plugin_answering(answer):
    class Mine:
        @trm.hookimpl
        def dense_optimizers(self):
            return answer()

    return Mine()


@pytest.mark.parametrize(
    ("answer", "fragments"),
    [case[1:] for case in WRONG_ANSWERS],
    ids=[case[0] for case in WRONG_ANSWERS],
)
def test_a_plugins_wrong_answer_is_one_error_naming_it_and_nothing_is_written(
    tmp_path, answer, fragments
):
    out = tmp_path / "given"
    out.mkdir()  # an empty folder given as out= stays empty: no .lock, no run files
    with pytest.raises(trm.TrmError) as refused:
        trm.train(
            "quickstart",
            out=out,
            plugins=[_plugin_answering(answer)],
            overrides={"train.optimizer": "mine"},
            max_steps=1,  # on a build where the answer passed, the test ends soon
        )
    message = str(refused.value)
    assert "\n" not in message and "no:Mine" in message
    for fragment in fragments:
        assert fragment in message, message
    assert list(out.iterdir()) == []
    with pytest.raises(trm.TrmError):
        trm.train(
            "quickstart",
            out=tmp_path / "new",
            plugins=[_plugin_answering(answer)],
            overrides={"train.optimizer": "mine"},
            max_steps=1,  # on a build where the answer passed, the test ends soon
        )
    assert not (tmp_path / "new").exists()


class HookAnswersAnInt:
    """An installed plugin (through the entry point below) whose hook answers an int."""

    ACTIVATION = "default"

    @trm.hookimpl
    def dense_optimizers(self):
        return 4


def test_an_installed_plugins_wrong_answer_is_one_line_on_the_command_line(
    cli, tmp_path, monkeypatch
):
    from importlib import metadata

    import trm.plugin_manager as plugin_manager

    wrong = metadata.EntryPoint(
        name="wrong", value="tests.test_optimizer_plugins:HookAnswersAnInt", group="trm.plugins"
    )
    real = plugin_manager._entry_points
    group = plugin_manager.ENTRY_POINT_GROUP  # the plugins, not the torch-free solvers
    monkeypatch.setattr(
        plugin_manager,
        "_entry_points",
        lambda g=group: [*real(g), *([wrong] if g == group else [])],
    )
    run_dir = tmp_path / "run"
    result = cli("run", "quickstart", "--set", "train.optimizer=mine", "--out", run_dir)
    assert_one_line_error(
        result, "plugin 'wrong' answered dense_optimizers with 4", "--plugins no:wrong"
    )
    assert not run_dir.exists()
    # switched off, it is out of the way: the built-in optimizers are offered as before
    result = cli("estimate", "quickstart", "--plugins", "no:wrong")
    assert result.code == 0, result.err


def test_the_plugin_that_offered_an_entry_is_named_when_two_offer_one_name():
    class Twin:
        @trm.hookimpl
        def dense_optimizers(self):
            return [DenseOptimizer("adamw", _sgd, 4)]

    from trm.plugin_manager import load_plugins

    pm = load_plugins(extra_modules=[("twin", Twin())])
    with pytest.raises(trm.TrmError, match=r"2 plugins \(adam, twin\) offer .* 'adamw'"):
        pm.dense_optimizer("adamw")
