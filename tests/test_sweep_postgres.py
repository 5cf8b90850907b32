"""A study shared by two machines on a real PostgreSQL server: two `trm sweep` processes with
their own `--out` on one `postgresql://` study, one killed with SIGKILL mid-trial. Every trial
runs once, the killed one is taken over by the other once its heartbeat lapses, and the study
finishes.

The server is started in a temporary folder with PostgreSQL's own `initdb` and `pg_ctl`
(README: Tests says how to install them); the test skips, naming what is missing, where they
or the psycopg driver (`pip install -e '.[postgres]'`) are not installed. As root the server
runs as an unprivileged user (PostgreSQL refuses root), through `runuser`.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.tiny_run import build_tiny_data, checkpoint_steps, write_spec

pytest.importorskip("optuna")


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _as_server_user() -> tuple[list[str], str | None]:
    """The command prefix that runs PostgreSQL's programs as a user it accepts, and that
    user's name (None: this user)."""
    if os.geteuid() != 0:
        return [], None
    runuser = shutil.which("runuser")
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        if runuser:
            return [runuser, "-u", name, "--"], name
    pytest.skip("running as root without runuser or an unprivileged user for PostgreSQL")


@pytest.fixture(scope="module")
def postgres() -> str:
    """A PostgreSQL server on a free port of 127.0.0.1 with an empty database "study"; its
    URL as docs/sweeps.md writes it (postgresql://USER@HOST:PORT/DB)."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip(
            "PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
            "apt-get install postgresql (README: Tests)"
        )
    try:
        import psycopg
    except ImportError:
        pytest.skip("the psycopg driver is not installed: pip install -e '.[postgres]'")
    prefix, user = _as_server_user()
    # not under pytest's tmp_path: its parents are closed to the unprivileged server user
    folder = Path(tempfile.mkdtemp(prefix="trm-postgres-"))
    if user is not None:
        record = pwd.getpwnam(user)
        os.chown(folder, record.pw_uid, record.pw_gid)
    os.chmod(folder, 0o700)
    port = _free_port()
    data = folder / "data"
    try:
        subprocess.run(
            [*prefix, initdb, "-D", str(data), "-U", "trm", "--auth=trust", "-E", "UTF8",
             "--no-sync"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-l", str(folder / "server.log"), "-w",
             "-t", "60", "-o", f"-p {port} -h 127.0.0.1 -k {folder} -F", "start"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {exc.stderr or exc.stdout}")
    try:
        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=trm dbname=postgres", autocommit=True
        ) as connection:
            connection.execute("CREATE DATABASE study")
        yield f"postgresql://trm@127.0.0.1:{port}/study"
    finally:
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True, timeout=60,
        )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


STUDY = """\
[study]
name = "shared"
spec = "{spec}"
seed = 0
heartbeat_s = 1
grace_s = 4

[objective]
metric = "best_exact_accuracy"
direction = "maximize"

[pruner]
kind = "none"

[space]
"arch.L_cycles" = {{ grid = [1, 2, 3] }}
"""


def _sweep(study: Path, out: Path, storage: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "trm", "sweep", str(study), "--out", str(out)]
    return subprocess.Popen(
        [*command, "--storage", storage], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _trials(storage: str) -> list:
    import optuna

    from trm.plugins.studies.runner import storage_url

    return optuna.load_study(study_name="shared", storage=storage_url(Path(), storage)).get_trials()


def _steps(run_dir: Path) -> list[int]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["step"] for row in rows if "kind" not in row]


@pytest.mark.slow
def test_two_machines_on_postgres_take_over_a_killed_workers_trial_and_run_each_once(
    postgres, tmp_path
):
    data = build_tiny_data(tmp_path / "data")
    spec = write_spec(tmp_path, data, eval_interval=10, max_steps=40)
    study = tmp_path / "shared.toml"
    study.write_text(STUDY.format(spec=spec))
    machine_a, machine_b = tmp_path / "machine-a", tmp_path / "machine-b"
    first = _sweep(study, machine_a, postgres)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (machine_a / "study.json").exists():
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.2)
    second = _sweep(study, machine_b, postgres)

    def cut_off_run() -> Path | None:  # machine A's trial, a few checkpoints in
        for run_dir in sorted((machine_a / "trials").glob("[0-9][0-9][0-9][0-9]")):
            steps = checkpoint_steps(run_dir) if (run_dir / "checkpoints").is_dir() else []
            if steps and max(steps) >= 5 and not (run_dir / "summary.json").exists():
                return run_dir
        return None

    killed = None
    while time.monotonic() < deadline and killed is None:
        assert first.poll() is None, first.communicate()[1][-3000:]
        killed = cut_off_run()
        time.sleep(0.1)
    assert killed is not None, "machine A never got a checkpoint into a trial"
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    _, err = second.communicate(timeout=600)
    assert second.returncode == 0, err[-3000:]

    trials = _trials(postgres)
    by_number = {t.number: t for t in trials}
    cut = next(t for t in trials if t.user_attrs.get("run_dir") == str(killed))
    assert cut.state.name == "FAIL"  # failed as cut off once its heartbeat lapsed ...
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == cut.number)
    assert retry.state.name == "COMPLETE"  # ... and taken over by machine B
    assert Path(retry.user_attrs["run_dir"]).parent == machine_b / "trials"
    assert f"starting trial {retry.number} (trial {cut.number}, cut off)" in err
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    # every grid point finished exactly once, each trained once from step 1 to 40
    assert sorted(t.params["arch.L_cycles"] for t in complete) == [1, 2, 3]
    for trial in complete:
        assert _steps(Path(trial.user_attrs["run_dir"])) == list(range(1, 41))
    assert {t.state.name for t in by_number.values()} == {"COMPLETE", "FAIL"}
    assert [t for t in trials if t.state.name == "FAIL"] == [cut]
