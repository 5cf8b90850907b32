"""benchmarks/step_profile.py counts a product's FLOPs from its shapes and files each
operator's time under the right kind, and refuses a bad shape name in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _step_profile():
    spec = importlib.util.spec_from_file_location("step_profile", BENCHMARKS / "step_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_product_flops_counts_two_per_multiply_add_for_mm_addmm_and_bmm():
    sp = _step_profile()
    assert sp.product_flops("aten::mm", [[3, 5], [5, 7]]) == 2 * 3 * 5 * 7
    assert sp.product_flops("aten::addmm", [[7], [3, 5], [5, 7]]) == 2 * 3 * 5 * 7
    assert sp.product_flops("aten::bmm", [[2, 3, 5], [2, 5, 7]]) == 2 * 2 * 3 * 5 * 7


def test_compiled_graphs_and_products_are_told_apart_from_other_operators():
    sp = _step_profile()
    assert sp.group_of("aten::mm") == "matrix_products"
    assert sp.group_of("## Call CompiledFxGraph fabc123 ##") == "compiled_elementwise"
    assert sp.group_of("graph_0_cpp_fused_mul_silu_split_1") == "compiled_elementwise"
    assert sp.group_of("aten::add_") == "other"


def test_an_unknown_shape_is_one_error_line_and_exit_2(capsys):
    sp = _step_profile()
    assert sp.main(["--only", "chess"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trm: error:") and "sudoku" in err[0]
