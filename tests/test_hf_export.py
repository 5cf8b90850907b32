"""``trm export RUN --format hf``: a model folder (model.safetensors, config.json, README.md)
that ``trm.load``, ``trm solve``, ``trm eval`` and ``trm run --init-from`` read back with json
and safetensors only, and the bad input around it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import trm
from tests.conftest import assert_one_line_error
from tests.test_interop import held_out
from tests.tiny_run import build_tiny_data, summary, write_spec
from trm.cli.main import main
from trm.plugin_manager import load_plugins
from trm.plugins.formats.hf_export import plain_tensors
from trm.restore import restore_model

# Held-out puzzles both models solve in the comparison.
PUZZLES = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """A tiny trained run (EMA on) and its export."""
    base = tmp_path_factory.mktemp("hf_export")
    data = build_tiny_data(base / "data")
    spec = write_spec(base, data)
    run_dir = base / "run"
    assert main(["run", str(spec), "--out", str(run_dir)]) == 0
    folder = base / "exported"
    args = ["export", str(run_dir), "--format", "hf", "--out", str(folder)]
    assert main([*args, "--license", "apache-2.0", "--dataset", "someone/sudoku-4x4"]) == 0
    return SimpleNamespace(base=base, data=data, spec=spec, run=run_dir, folder=folder)


def _copy(folder: Path, to: Path, skip: tuple[str, ...] = ()) -> Path:
    to.mkdir()
    for path in folder.iterdir():
        if path.name not in skip:
            (to / path.name).write_bytes(path.read_bytes())
    return to


def test_the_exported_folder_solves_the_same_puzzles_with_the_same_answers_as_the_run(tiny):
    run_model, exported = trm.load(tiny.run), trm.load(tiny.folder)
    assert exported.step == run_model.step == 12
    questions = held_out(tiny.data)["inputs"][:PUZZLES]
    for question in questions:
        text = run_model.source.format_grid(question)
        theirs, ours = run_model.solve(text), exported.solve(text)
        assert ours.tokens.tolist() == theirs.tokens.tolist()
        assert (ours.answer, ours.valid, ours.steps) == (theirs.answer, theirs.valid, theirs.steps)
    ran, loaded = run_model.module.state_dict(), exported.module.state_dict()
    assert ran.keys() == loaded.keys()
    assert all(torch.equal(ran[k], loaded[k]) for k in ran)


def test_the_exported_weights_are_the_ema_copy_the_checkpoint_stores(tiny):
    """Each averaged tensor of the folder is the checkpoint's stored EMA shadow, bit for bit
    (not the raw weights); every other tensor (buffers) is the checkpoint's model tensor."""
    payload = load_plugins(()).hook.load_checkpoint(path=tiny.run, map_location="cpu")
    shadow, raw = payload["ema"]["shadow"], payload["model"]
    exported = load_file(tiny.folder / "model.safetensors")
    assert shadow and set(shadow) <= set(exported)
    for name, tensor in exported.items():
        assert torch.equal(tensor, shadow.get(name, raw[name])), name
    assert any(not torch.equal(shadow[name], raw[name]) for name in shadow)
    assert json.loads((tiny.folder / "config.json").read_text())["weights"]["ema"] is True


def test_the_exported_weights_are_what_trm_solve_uses(tiny):
    payload = load_plugins(()).hook.load_checkpoint(path=tiny.run, map_location="cpu")
    _, model = restore_model(payload, torch.device("cpu"))
    exported = load_file(tiny.folder / "model.safetensors")
    assert all(torch.equal(exported[k], v) for k, v in plain_tensors(model).items())


def test_the_folder_holds_no_pickle_and_its_weights_load_with_safetensors_alone(tiny):
    names = sorted(p.name for p in tiny.folder.iterdir())
    assert names == ["README.md", "config.json", "model.safetensors"]
    for path in tiny.folder.iterdir():
        assert path.suffix in (".json", ".md", ".safetensors"), path
        assert not path.read_bytes().startswith((b"\x80", b"PK\x03\x04")), path  # pickle, zip
    json.loads((tiny.folder / "config.json").read_text(encoding="utf-8"))
    (tiny.folder / "README.md").read_text(encoding="utf-8")
    with safe_open(tiny.folder / "model.safetensors", framework="pt") as weights:
        keys = set(weights.keys())
        assert weights.metadata() == {"format": "pt"}
        assert all(weights.get_tensor(k).numel() > 0 for k in keys)
    assert "lm_head.weight" in keys and "q_head.weight" in keys


def test_loading_the_folder_never_calls_torch_load(tiny, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", refuse)
    model = trm.load(tiny.folder)
    question = held_out(tiny.data)["inputs"][0]
    assert model.solve(model.source.format_grid(question)).answer


def test_the_config_names_the_architecture_the_data_layout_and_the_task(tiny):
    config = json.loads((tiny.folder / "config.json").read_text())
    assert (config["format"], config["format_version"]) == ("trm", 1)
    assert config["architecture"] == "TinyRecursiveModel"
    layout = config["data_layout"]
    assert (layout["seq_len"], layout["vocab_size"], layout["puzzle_prefix_len"]) == (16, 6, 1)
    assert config["task"]["source"] == "sudoku" and config["task"]["name"] == "tiny"
    assert config["spec"]["arch"]["hidden_size"] == 16 and config["step"] == 12


def test_the_model_card_names_the_held_out_accuracy_the_command_and_the_machine(tiny):
    text = (tiny.folder / "README.md").read_text()
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["library_name"] == "trm" and meta["license"] == "apache-2.0"
    assert meta["datasets"] == ["someone/sudoku-4x4"]
    assert "sudoku" in meta["tags"]
    eval_rows = [
        json.loads(line)
        for line in (tiny.run / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    last = next(row for row in eval_rows if row["step"] == 12)
    assert last["exact_accuracy"] == summary(tiny.run)["final_exact_accuracy"]
    assert (
        f"Held-out exact accuracy: {last['exact_accuracy'] * 100:.2f}% on {last['examples']} "
        "examples of the 'test' split, measured by the run at step 12." in body
    )
    assert "Command: `trm run spec.toml`" in body and "max_steps = 12" in body
    hardware = json.loads((tiny.run / "hardware.json").read_text())
    assert f"Machine: {hardware['cpu_model']}" in body
    assert "Steps: 12 of the run's 12" in body
    assert 'trm.load("DIR")' in body


def test_trm_solve_and_eval_take_the_folder(tiny, cli):
    question = held_out(tiny.data)["inputs"][0]
    text = trm.load(tiny.run).source.format_grid(question)
    solved_run, solved_folder = cli("solve", tiny.run, text), cli("solve", tiny.folder, text)
    assert solved_folder.code == 0 and solved_folder.out == solved_run.out
    scored = cli("eval", tiny.folder, "--data", tiny.data, "--json")
    assert scored.code == 0, scored.err
    assert json.loads(scored.out)["exact_accuracy"] == pytest.approx(
        json.loads(cli("eval", tiny.run, "--json").out)["exact_accuracy"]
    )


def test_init_from_the_folder_starts_a_run_from_its_weights(tiny, tmp_path, cli):
    spec = write_spec(tmp_path, tiny.data, max_steps=1, lr=1e-30, puzzle_emb_lr=0.0)
    second = tmp_path / "second"
    result = cli("run", spec, "--out", second, "--init-from", tiny.folder)
    assert result.code == 0, result.err
    assert f"starting from the weights of model folder {tiny.folder}" in result.err
    started = torch.load(second / "checkpoints" / "step-00000001.pt", weights_only=True)
    stored = load_file(tiny.folder / "model.safetensors")
    assert torch.equal(started["model"]["lm_head.weight"], stored["lm_head.weight"])


def test_a_folder_with_a_config_but_no_weights_is_refused(tiny, tmp_path, cli):
    folder = _copy(tiny.folder, tmp_path / "noweights", skip=("model.safetensors",))
    assert_one_line_error(cli("solve", folder, "1..."), "no model.safetensors")
    with pytest.raises(trm.TrmError, match=r"no model\.safetensors"):
        trm.load(folder)


def test_a_config_of_a_newer_format_version_is_refused(tiny, tmp_path, cli):
    folder = _copy(tiny.folder, tmp_path / "newer")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "format_version": 2}))
    assert_one_line_error(cli("solve", folder, "1..."), "format version 2", "upgrade trm")
    spec = write_spec(tmp_path, tiny.data, max_steps=1)
    result = cli("run", spec, "--out", tmp_path / "r", "--init-from", folder)
    assert_one_line_error(result, "--init-from", "format version 2")
    assert not (tmp_path / "r").exists()
    with pytest.raises(trm.TrmError, match="format version 2"):
        trm.load(folder)


def test_another_librarys_config_is_refused(tiny, tmp_path, cli):
    folder = _copy(tiny.folder, tmp_path / "other")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert_one_line_error(cli("solve", folder, "1..."), "not a trm model's config")


def test_weights_of_another_shape_are_refused(tiny, tmp_path, cli):
    folder = _copy(tiny.folder, tmp_path / "shape")
    weights = load_file(folder / "model.safetensors")
    weights["lm_head.weight"] = torch.zeros(7, 16)
    save_file(weights, folder / "model.safetensors")
    assert_one_line_error(cli("solve", folder, "1..."), "lm_head.weight", "[7, 16]")
    with pytest.raises(trm.TrmError, match=r"lm_head\.weight"):
        trm.load(folder)


def test_damaged_safetensors_are_refused(tiny, tmp_path, cli):
    folder = _copy(tiny.folder, tmp_path / "damaged")
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    assert_one_line_error(cli("solve", folder, "1..."), "cannot be read as safetensors")


def test_exporting_a_run_with_no_checkpoint_writes_nothing(tiny, tmp_path, cli):
    empty = tmp_path / "empty_run"
    empty.mkdir()
    out = tmp_path / "out"
    result = cli("export", empty, "--format", "hf", "--out", out)
    assert_one_line_error(result, "no checkpoint found")
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty_run"]  # no staging left


def test_tensors_that_share_memory_are_stored_each_under_its_own_name(tmp_path):
    tied = torch.nn.Sequential(torch.nn.Embedding(4, 3), torch.nn.Linear(3, 4, bias=False))
    tied[1].weight = tied[0].weight  # one tensor under two names, as tied weights are
    with pytest.raises(RuntimeError):
        save_file(tied.state_dict(), tmp_path / "raw.safetensors")
    save_file(plain_tensors(tied), tmp_path / "plain.safetensors")
    stored = load_file(tmp_path / "plain.safetensors")
    assert torch.equal(stored["0.weight"], stored["1.weight"])


def test_the_folder_exports_again_to_the_references_layout(tiny, tmp_path, cli):
    out = tmp_path / "reference"
    result = cli("export", tiny.folder, "--format", "reference", "--out", out)
    assert result.code == 0, result.err
    state = torch.load(out / "step_12", weights_only=True)
    stored = load_file(tiny.folder / "model.safetensors")
    assert torch.equal(state["_orig_mod.model.inner.lm_head.weight"], stored["lm_head.weight"])


def test_the_weights_file_is_as_readable_as_the_rest_of_the_folder(tiny):
    modes = {p.name: p.stat().st_mode & 0o777 for p in tiny.folder.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"] == modes["README.md"], modes


def test_the_folder_exported_again_keeps_its_weights_and_says_they_are_the_ema_copy(
    tiny, tmp_path, cli
):
    out = tmp_path / "again"
    assert cli("export", tiny.folder, "--format", "hf", "--out", out).code == 0
    first = load_file(tiny.folder / "model.safetensors")
    again = load_file(out / "model.safetensors")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    config = json.loads((out / "config.json").read_text())
    assert config["weights"]["ema"] is True and config["step"] == 12


def test_model_card_options_with_the_reference_format_are_refused(tiny, tmp_path, cli):
    out = tmp_path / "ref"
    result = cli("export", tiny.run, "--format", "reference", "--out", out, "--license", "mit")
    assert_one_line_error(result, "--license and --dataset", "--format hf")
    assert not out.exists()


def test_the_model_cards_metadata_reads_back_as_given_with_any_text():
    from huggingface_hub import ModelCard

    from trm.data.shape import DatasetShape
    from trm.plugins.formats.hf_card import RunRecord, model_card
    from trm.spec import load_spec, resolve_spec_path

    spec = load_spec(resolve_spec_path("quickstart"))
    shape = DatasetShape(seq_len=16, vocab_size=6, num_puzzle_identifiers=1)
    record = RunRecord(None, None, None, None, None, None, None)
    datasets = ("user/😀", "ünï/çødé: ü", "a\u2028b", "- x", "null")
    text = model_card(spec, shape, record, 12, True, "apache-2.0", datasets)
    _, front, _ = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["datasets"] == list(datasets) and meta["license"] == "apache-2.0"
    assert "😀" in front  # written as the character, not as an escape
    card = ModelCard(text)  # the Hub's own reader agrees
    assert card.data.datasets == list(datasets) and card.data.library_name == "trm"
    plain = model_card(spec, shape, record, 12, True, None, ())
    meta = yaml.safe_load(plain.split("---\n", 2)[1])
    assert "license" not in meta and "datasets" not in meta
