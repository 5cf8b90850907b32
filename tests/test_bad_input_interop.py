"""Bad input to ``trm import``, ``trm export`` and ``trm run --init-from``: one
``trm: error:`` line, exit 2, no traceback, and the output folder untouched (never created,
or left as it was)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from tests.conftest import assert_one_line_error
from tests.test_interop import STEP, reference_arch, reference_config, write_reference_run
from tests.tiny_run import build_tiny_data, write_spec
from trm.cli.main import main


class _RunsCode:
    """A pickled object whose loading would run code (it creates a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """The dataset, a good reference run, a trained trm run and variants of bad input."""
    base = tmp_path_factory.mktemp("bad_interop")
    data = build_tiny_data(base / "data")
    good, _ = write_reference_run(base / "good", data, reference_arch(), True)
    state = torch.load(good, weights_only=True)
    spec = write_spec(base, data, max_steps=2)
    trained = base / "trained"
    assert main(["run", str(spec), "--out", str(trained)]) == 0

    def variant(name: str, weights=None, config=None) -> Path:
        folder = base / name
        folder.mkdir()
        torch.save(state if weights is None else weights, folder / f"step_{STEP}")
        cfg = reference_config(data, reference_arch()) if config is None else config
        (folder / "all_config.yaml").write_text(yaml.safe_dump(cfg))
        return folder / f"step_{STEP}"

    first = next(iter(state))
    smaller = {k: v[..., :-1] if k.endswith("lm_head.weight") else v for k, v in state.items()}
    marker = base / "code-ran"
    cases = SimpleNamespace(
        base=base,
        data=data,
        good=good,
        trained=trained,
        marker=marker,
        not_a_state_dict=variant("list", weights=[1, 2, 3]),
        missing_key=variant("missing", weights={k: v for k, v in state.items() if k != first}),
        extra_key=variant(
            "extra", weights={**state, "_orig_mod.model.inner.extra": torch.zeros(2)}
        ),
        wrong_shape=variant("shape", weights=smaller),
        code=variant("code", weights={"x": _RunsCode(marker)}),
        other_table=write_reference_run(
            base / "table", data, reference_arch(), True, identifiers=5
        )[0],
        unknown_arch=variant(
            "arch", config=reference_config(data, reference_arch(name="models.hrm@HRM"))
        ),
        unknown_key=variant(
            "key", config={**reference_config(data, reference_arch()), "curriculum": True}
        ),
    )
    (base / "noconfig").mkdir()
    torch.save(state, base / "noconfig" / f"step_{STEP}")
    cases.no_config = base / "noconfig" / f"step_{STEP}"
    (base / "text").mkdir()
    (base / "text" / f"step_{STEP}").write_text("these are my notes\n")
    (base / "text" / "all_config.yaml").write_text((base / "good" / "all_config.yaml").read_text())
    cases.text = base / "text" / f"step_{STEP}"
    head = next(k for k in state if k.endswith("lm_head.weight"))
    cases.integer_tensor = variant("int", weights={**state, head: state[head].long()})
    (base / "empty").mkdir()
    cases.empty_folder = base / "empty"
    cases.yaml_file = base / "good" / "all_config.yaml"
    newest = sorted((trained / "checkpoints").glob("step-*.pt"))[-1]
    cases.truncated = base / "truncated.pt"
    cases.truncated.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    (base / "hash").mkdir()
    cases.bad_hash = base / "hash" / newest.name
    cases.bad_hash.write_bytes(newest.read_bytes())
    (base / "hash" / f"{newest.name}.sha256").write_text(f"{'0' * 64}  {newest.name}\n")
    return cases


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("not_a_state_dict", ["not a state dict", "list"]),
        ("text", ["not a PyTorch file"]),
        ("unknown_arch", ["arch.name", "models.hrm@HRM", "not an architecture"]),
        ("unknown_key", ["curriculum", "cannot honour"]),
        ("no_config", ["no all_config.yaml beside", "--config"]),
        ("missing_key", ["is missing"]),
        ("extra_key", ["unexpected key model.inner.extra"]),
        ("wrong_shape", ["lm_head.weight has shape", "needs"]),
        ("code", ["refused", "pickled code"]),
        ("other_table", ["puzzle table has 5 rows", "1 puzzle identifiers"]),
    ],
)
def test_bad_import_is_one_line_and_writes_nothing(tiny, tmp_path, cli, case, fragments):
    out = tmp_path / "imported"
    result = cli("import", getattr(tiny, case), "--out", out)
    assert_one_line_error(result, *fragments)
    assert not out.exists()
    assert not tiny.marker.exists()
    assert not list(tmp_path.iterdir())  # no staging folder left behind


def test_import_with_a_missing_config_file_given(tiny, tmp_path, cli):
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--config", tmp_path / "nope.yaml", "--out", out)
    assert_one_line_error(result, "nope.yaml does not exist")
    assert not out.exists()


def test_import_into_a_folder_that_holds_files_leaves_it_as_it_was(tiny, tmp_path, cli):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    before = _files(out)
    assert_one_line_error(cli("import", tiny.good, "--out", out), "not empty")
    assert _files(out) == before


def test_import_of_data_with_other_identifiers_than_the_configs(tiny, tmp_path, cli):
    other = tmp_path / "other"
    build_tiny_data(other)
    (other / "identifiers.json").write_text('["other"]')  # as many, named otherwise
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--data", other, "--out", out)
    assert_one_line_error(result, "different puzzle identifiers")
    assert not out.exists()


@pytest.mark.parametrize(
    ("which", "fragments"),
    [
        ("good", ["not a trm checkpoint"]),  # a reference file, not a trm run
        ("data", ["no checkpoint found"]),  # a folder without checkpoints
        ("missing", ["does not exist"]),
    ],
)
def test_bad_export_is_one_line_and_writes_nothing(tiny, tmp_path, cli, which, fragments):
    source = tmp_path / "missing" if which == "missing" else getattr(tiny, which)
    out = tmp_path / "exported"
    result = cli("export", source, "--format", "reference", "--out", out)
    assert_one_line_error(result, *fragments)
    assert not out.exists()


def test_export_into_a_folder_that_holds_files_leaves_it_as_it_was(tiny, tmp_path, cli):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "step_1").write_bytes(b"mine")
    before = _files(out)
    result = cli("export", tiny.trained, "--format", "reference", "--out", out)
    assert_one_line_error(result, "not empty")
    assert _files(out) == before


def test_export_needs_a_known_format(tiny, tmp_path, cli):
    result = cli("export", tiny.trained, "--format", "tflite", "--out", tmp_path / "x")
    assert_one_line_error(result, "--format")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("not_a_state_dict", ["not a state dict"]),
        ("text", ["not a PyTorch file"]),
        ("code", ["refused", "pickled code"]),
        ("wrong_shape", ["does not fit this run's model", "lm_head.weight"]),
        ("missing_key", ["does not fit this run's model", "is missing"]),
        ("extra_key", ["unexpected"]),
        ("integer_tensor", ["holds torch.int64, not weights"]),
        ("empty_folder", ["--init-from", "no step_N checkpoint"]),
        ("yaml_file", ["--init-from", "not a PyTorch file"]),
        ("truncated", ["--init-from", "cannot be read"]),
        ("bad_hash", ["--init-from", "SHA-256"]),
    ],
)
def test_bad_init_from_is_one_line_and_writes_no_run(tiny, tmp_path, cli, case, fragments):
    # the good reference arch is attention + RoPE; this spec matches it but for the cases
    spec = write_spec(tmp_path, tiny.data, max_steps=1)
    text = spec.read_text().replace("mlp_t = true", "mlp_t = false")
    spec.write_text(text.replace('pos_encodings = "none"', 'pos_encodings = "rope"'))
    run_dir = tmp_path / "run"
    result = cli("run", spec, "--out", run_dir, "--init-from", getattr(tiny, case))
    assert_one_line_error(result, *fragments)
    assert not run_dir.exists()  # checked before the run folder, its lock or its data
    assert not tiny.marker.exists()


def test_init_from_a_path_that_does_not_exist(tiny, tmp_path, cli):
    spec = write_spec(tmp_path, tiny.data, max_steps=1)
    result = cli("run", spec, "--out", tmp_path / "run", "--init-from", tmp_path / "nope")
    assert_one_line_error(result, "--init-from", "no such checkpoint")
    assert not (tmp_path / "run").exists()


def test_a_refused_init_from_builds_no_data_into_the_run_folder(tiny, tmp_path, cli):
    spec = tmp_path / "built.toml"  # no data.dir: the run would build its data into --out
    spec.write_text(
        write_spec(tmp_path, tiny.data, max_steps=1)
        .read_text()
        .replace(f'dir = "{tiny.data}"', "[data.generate]\nsize = 4\ncount = 32\ntest_count = 8")
    )
    run_dir = tmp_path / "run"
    result = cli("run", spec, "--out", run_dir, "--init-from", tiny.text)
    assert_one_line_error(result, "not a PyTorch file")
    assert not run_dir.exists()


def test_a_refused_init_from_leaves_an_existing_run_folder_as_it_was(tiny, tmp_path, cli):
    spec = write_spec(tmp_path, tiny.data, max_steps=1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    result = cli("run", spec, "--out", run_dir, "--init-from", tiny.wrong_shape)
    assert_one_line_error(result, "does not fit this run's model")
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]


def _with(change):
    def changed(config: dict) -> dict:
        change(config)
        return config

    return changed


CONFIG_CASES = [
    ("epochs-text", _with(lambda c: c.update(epochs="lots")), ["epochs", "expected a number"]),
    ("epochs-null", _with(lambda c: c.update(epochs=None)), ["epochs", "got null"]),
    (
        "eval-interval-text",
        _with(lambda c: c.update(eval_interval="often")),
        ["eval_interval", "expected a whole number", "'often'"],
    ),
    (
        "eval-interval-negative",
        _with(lambda c: c.update(eval_interval=-3)),
        ["eval_interval", "-3", "at least 1"],
    ),
    (
        "loss-type-list",
        _with(lambda c: c["arch"]["loss"].update(loss_type=["softmax_cross_entropy"])),
        ["arch.loss.loss_type", "expected a text", "a list"],
    ),
    (
        "forward-dtype-list",
        _with(lambda c: c["arch"].update(forward_dtype=["float32"])),
        ["arch.forward_dtype", "expected a text", "a list"],
    ),
    (
        "numeric-key-beside-unknown",
        _with(lambda c: c.update({5: 1, "zzz": 2})),
        ["5", "trm cannot honour this key"],
    ),
    (
        "numeric-arch-key",
        _with(lambda c: c["arch"].update({7: 1, "zzz": 2})),
        ["arch.7", "trm cannot honour this key"],
    ),
]


@pytest.mark.parametrize(
    ("case", "change", "fragments"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES]
)
def test_a_wrongly_typed_config_value_is_one_line_naming_the_key(
    tiny, tmp_path, cli, case, change, fragments
):
    config = change(reference_config(tiny.data, reference_arch()))
    path = tmp_path / "all_config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--config", path, "--out", out)
    assert_one_line_error(result, str(path), *fragments)
    assert not out.exists()


def test_the_arc_evaluator_named_as_a_bare_word_is_accepted(tiny, tmp_path, cli):
    """``evaluators: [arc@ARC]``, the form docs/interop.md shows."""
    config = reference_config(tiny.data, reference_arch())
    config["evaluators"] = ["arc@ARC"]
    path = tmp_path / "all_config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--config", path, "--out", out)
    assert result.code == 0, result.err
    assert "eval_pool = true" in (out / "spec.toml").read_text()


@pytest.mark.parametrize(
    ("source", "fragments"),
    [
        ("nosuch", ["--source nosuch", "unknown data source", "sudoku"]),
        ("maze", ["--source maze", "not maze puzzles", "look like sudoku"]),
    ],
)
def test_an_unknown_or_contradicted_source_is_refused(tiny, tmp_path, cli, source, fragments):
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--source", source, "--out", out)
    assert_one_line_error(result, *fragments)
    assert not out.exists()


def test_a_source_other_than_the_datasets_build_record_is_refused(tiny, tmp_path, cli):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny.data, data)
    (data / "build.json").write_text('{"source": "sudoku", "options": {}, "seed": 0}')
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--data", data, "--source", "arc", "--out", out)
    assert_one_line_error(result, "--source arc contradicts", "build.json", "'sudoku'")
    assert not out.exists()


def test_the_datasets_own_source_given_with_source_is_accepted(tiny, tmp_path, cli):
    out = tmp_path / "imported"
    result = cli("import", tiny.good, "--source", "sudoku", "--out", out)
    assert result.code == 0, result.err
    assert 'source = "sudoku"' in (out / "spec.toml").read_text()


@pytest.mark.parametrize("command", ["import", "export"])
def test_an_empty_out_is_refused(tiny, tmp_path, cli, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # an empty folder: "" would otherwise mean it
    source = tiny.good if command == "import" else tiny.trained
    extra = ["--format", "reference"] if command == "export" else []
    result = cli(command, source, *extra, "--out", "")
    assert_one_line_error(result, "--out", "empty")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["import", "export"])
def test_an_out_on_a_read_only_mount_is_one_line(tiny, tmp_path, cli, monkeypatch, command):
    """Root writes anywhere, so the read-only folder is a write that fails as on one."""
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.parent == tmp_path:
            raise OSError(30, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    source = tiny.good if command == "import" else tiny.trained
    extra = ["--format", "reference"] if command == "export" else []
    out = tmp_path / "out"
    result = cli(command, source, *extra, "--out", out)
    assert_one_line_error(result, f"--out {out}", "Read-only file system", "choose another")
    assert not list(tmp_path.iterdir())
