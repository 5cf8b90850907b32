"""Run specs: shipped specs load, round-trip through TOML, and bad values name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from trm.errors import TrmError
from trm.spec import (
    RunSpec,
    apply_overrides,
    load_spec,
    resolve_spec_path,
    shipped_spec_names,
    spec_to_toml,
)


def test_shipped_specs_include_quickstart_and_paper_recipes():
    assert {"quickstart", "sudoku-extreme-mlp", "sudoku-extreme-att"} <= set(shipped_spec_names())


@pytest.mark.parametrize("name", ["quickstart", "sudoku-extreme-mlp", "sudoku-extreme-att"])
def test_shipped_spec_round_trips_through_toml(name, tmp_path):
    spec = load_spec(resolve_spec_path(name))
    path = tmp_path / f"{name}.toml"
    path.write_text(spec_to_toml(spec))
    assert load_spec(path) == spec


def test_paper_mlp_recipe_carries_the_papers_sudoku_hyperparameters():
    spec = load_spec(resolve_spec_path("sudoku-extreme-mlp"))
    a, t = spec.arch, spec.train
    assert (a.hidden_size, a.L_layers, a.H_cycles, a.L_cycles) == (512, 2, 3, 6)
    assert a.mlp_t and a.pos_encodings == "none"
    assert (a.halt_max_steps, a.halt_exploration_prob, a.puzzle_emb_len) == (16, 0.1, 16)
    assert (t.global_batch_size, t.lr, t.weight_decay, t.puzzle_emb_lr) == (768, 1e-4, 1.0, 1e-4)
    assert t.ema and t.ema_rate == 0.999
    att = load_spec(resolve_spec_path("sudoku-extreme-att")).arch
    assert not att.mlp_t and att.pos_encodings == "rope"


def test_override_changes_only_the_named_key():
    spec = apply_overrides(RunSpec(), ["train.lr=3e-4", "arch.mlp_t=true"])
    assert spec.train.lr == 3e-4 and spec.arch.mlp_t
    assert spec.train.global_batch_size == RunSpec().train.global_batch_size


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.lr=-1", "train.lr"),
        ("train.lr=fast", "train.lr"),
        ("arch.hidden_size=100", "arch.hidden_size"),
        ("arch.hidden_size=true", "arch.hidden_size"),
        ("train.nope=1", "nope"),
        ("nosection.key=1", "nosection"),
        ("runtime.device=TPU v4!", "runtime.device"),  # not a device name in form
    ],
)
def test_bad_override_is_an_error_naming_the_key(override, named):
    with pytest.raises(TrmError, match=named.replace(".", r"\.")):
        apply_overrides(RunSpec(), [override])


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def test_unknown_key_in_file_names_the_section(tmp_path):
    with pytest.raises(TrmError, match=r"hiden_size.*\[arch\]"):
        load_spec(_write(tmp_path, "[arch]\nhiden_size = 64\n[train]\nmax_steps = 1\n"))


def test_wrong_type_in_file_names_the_key_path(tmp_path):
    with pytest.raises(TrmError, match=r"train\.global_batch_size"):
        load_spec(_write(tmp_path, '[train]\nmax_steps = 1\nglobal_batch_size = "big"\n'))


def test_malformed_toml_names_the_file(tmp_path):
    with pytest.raises(TrmError, match="malformed TOML"):
        load_spec(_write(tmp_path, "[train\nmax_steps = 1\n"))
