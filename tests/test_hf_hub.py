"""Model folders shared the Hub's way: ``trm.load(repo_id)`` and ``trm solve repo_id`` from
the local Hugging Face cache without network, and ``trm export --format hf --push-to-hub``
through huggingface_hub's own upload API (faked here: tests never reach the network)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import huggingface_hub
import pytest

from tests.conftest import assert_one_line_error

PUZZLE = "1.3...1..1...4.1"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    from trm.cli.main import main

    folder = tmp_path_factory.mktemp("hub") / "quickstart-hf"
    assert main(["export", "quickstart", "--format", "hf", "--out", str(folder)]) == 0
    return folder


def cache_layout(home: Path, repo_id: str, folder: Path) -> Path:
    """``folder`` placed in the Hugging Face cache under ``home`` as a downloaded snapshot of
    the model repo ``repo_id`` (HF_HOME/hub/models--OWNER--NAME/{refs/main, snapshots/REV})."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION, encoding="utf-8")
    return snapshot


def offline(home: Path, script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)


def test_a_repo_id_in_the_hub_cache_loads_and_solves_offline(hf_folder, tmp_path, cli):
    cache_layout(tmp_path / "hf", "someone/trm-quickstart", hf_folder)
    script = (
        "import json, trm\n"
        "from trm.cli.main import main\n"
        "model = trm.load('someone/trm-quickstart')\n"
        f"print(json.dumps([str(model.checkpoint), model.solve({PUZZLE!r}).answer]))\n"
    )
    done = offline(tmp_path / "hf", script)
    assert done.returncode == 0, done.stderr
    checkpoint, answer = json.loads(done.stdout.splitlines()[-1])
    assert Path(checkpoint).parent.name == "snapshots" or REVISION in checkpoint
    assert (
        answer
        == cli("solve", "quickstart", PUZZLE).out.split("model's answer:\n")[1].split("\nvalid")[0]
    )
    command = [sys.executable, "-m", "trm", "solve", "someone/trm-quickstart", PUZZLE]
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    solved = subprocess.run(command, capture_output=True, text=True, env=env)
    assert solved.returncode == 0, solved.stderr
    assert solved.stdout == cli("solve", "quickstart", PUZZLE).out


def test_a_repo_id_not_in_the_cache_is_one_line_saying_how_to_download_it(tmp_path):
    env = {**os.environ, "HF_HOME": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "trm", "solve", "someone/absent", PUZZLE]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("trm: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "hf download someone/absent" in lines[0]


class FakeApi:
    """Records the calls trm makes of ``huggingface_hub.HfApi``."""

    calls: ClassVar[list[tuple[str, dict]]] = []
    refuse: ClassVar[Exception | None] = None

    def create_repo(self, repo_id: str, **kwargs) -> str:
        FakeApi.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        if FakeApi.refuse is not None:
            raise FakeApi.refuse
        FakeApi.calls.append(("upload_folder", kwargs))
        files = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())
        FakeApi.calls.append(("files", {"names": files}))
        return type("Commit", (), {"commit_url": "https://huggingface.co/x/commit/1"})()


@pytest.fixture
def fake_hub(monkeypatch):
    FakeApi.calls, FakeApi.refuse = [], None
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    return FakeApi


def test_push_to_hub_creates_the_repo_and_uploads_the_folder_with_the_hub_api(
    fake_hub, cli, tmp_path
):
    out = tmp_path / "out"
    result = cli(
        "export", "quickstart", "--format", "hf", "--out", out, "--push-to-hub", "me/qs", "--json"
    )
    assert result.code == 0, result.err
    names = [name for name, _ in fake_hub.calls]
    assert names == ["create_repo", "upload_folder", "files"]
    assert fake_hub.calls[0][1] == {"repo_id": "me/qs", "repo_type": "model", "exist_ok": True}
    upload = fake_hub.calls[1][1]
    assert upload["repo_id"] == "me/qs" and Path(upload["folder_path"]) == out
    assert fake_hub.calls[2][1]["names"] == ["README.md", "config.json", "model.safetensors"]
    assert json.loads(result.out)["pushed"] == "https://huggingface.co/x/commit/1"


def test_a_bad_repo_id_is_refused_before_anything_is_written(fake_hub, cli, tmp_path):
    out = tmp_path / "out"
    result = cli("export", "quickstart", "--format", "hf", "--out", out, "--push-to-hub", "no")
    assert_one_line_error(result, "--push-to-hub no", "OWNER/NAME")
    assert not out.exists() and fake_hub.calls == []


def test_a_refused_upload_is_one_line_naming_the_written_folder(fake_hub, cli, tmp_path):
    fake_hub.refuse = RuntimeError("401 Client Error: Unauthorized")
    out = tmp_path / "out"
    result = cli("export", "quickstart", "--format", "hf", "--out", out, "--push-to-hub", "me/qs")
    assert_one_line_error(result, "401", "hf upload me/qs", "hf auth login")
    assert (out / "model.safetensors").is_file()


def test_push_to_hub_belongs_to_the_hf_format(cli, tmp_path):
    out = tmp_path / "out"
    result = cli("export", "quickstart", "--format", "onnx", "--out", out, "--push-to-hub", "a/b")
    assert_one_line_error(result, "--push-to-hub", "--format hf")
    assert not out.exists()
