"""Coverage tallies and backward-node lists from an edge map (difftest/findings/coverage.py),
on a small hand-made map; the report's coverage section."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.exec.coverage_map import EdgeMap
from difftest.findings.coverage import Coverage, backward_nodes, node_name, summarise
from difftest.findings.report_coverage import coverage_section, is_coverage, load_coverages

REG = "/r/registry/src/index.crates.io-x"
ADD = ("<burn_autodiff::ops::tensor::<impl burn_backend::backend::ops::tensor::FloatTensorOps<burn_autodiff::backend::"
       "Autodiff<B,C>> for burn_autodiff::backend::Autodiff<B,C>>::float_add::Add as burn_autodiff::ops::backward::"
       "Backward<B,2_usize>>::backward")
EXP = ("<burn_autodiff::ops::tensor::<impl burn_backend::backend::ops::tensor::FloatTensorOps<burn_autodiff::backend::"
       "Autodiff<B,C>> for burn_autodiff::backend::Autodiff<B,C>>::float_exp::Exp as burn_autodiff::ops::backward::"
       "Backward<B,1_usize>>::backward")
CONV = "<burn_autodiff::ops::module::Conv2DWithBias as burn_autodiff::ops::backward::Backward<B,3_usize>>::backward"


def _map() -> EdgeMap:
    files = [f"{REG}/burn-autodiff-0.22.1/src/ops/tensor.rs", f"{REG}/burn-flex-0.22.1/src/ops/add.rs",
             "/work/rust/src/exec.rs", f"{REG}/burn-autodiff-0.22.1/src/ops/module.rs"]
    functions = [ADD, EXP, "burn_flex::add", "difftest_burn::exec::run", CONV]
    #        edge:   0    1    2    3    4    5    6
    file = [0, 0, 0, 1, 1, 2, 3]
    line = [10, 10, 20, 5, 6, 1, 30]
    function = [0, 0, 1, 2, 2, 3, 4]
    backward = [0, 0, 1, -1, -1, -1, 4]
    return EdgeMap(files, functions, file, line, function, backward)


def test_node_names() -> None:
    assert node_name(ADD) == "tensor::float_add::Add"
    assert node_name(CONV) == "module::Conv2DWithBias"


def test_tallies_count_burn_edges_and_lines_per_crate_and_file() -> None:
    cov = summarise(_map(), {0, 3, 5}, source="test", programs=2)
    assert cov.crates["burn-autodiff"].to_dict() == {"edges": 1, "edges_total": 4, "lines": 1, "lines_total": 3}
    assert cov.crates["burn-flex"].to_dict() == {"edges": 1, "edges_total": 2, "lines": 1, "lines_total": 2}
    assert set(cov.crates) == {"burn-autodiff", "burn-flex"}  # the interpreter's edge is no crate of burn
    assert cov.files["burn-autodiff/src/ops/tensor.rs"].edges_total == 3


def test_backward_nodes_split_by_the_catalogs_reach() -> None:
    m = _map()
    assert backward_nodes(m) == {"tensor::float_add::Add", "tensor::float_exp::Exp", "module::Conv2DWithBias"}
    catalog = {"add": {"tensor::float_add::Add"}, "exp": {"tensor::float_exp::Exp"}}
    cov = summarise(m, {0}, source="test", programs=1, catalog=catalog)
    assert cov.nodes_reached == ["tensor::float_add::Add"]
    assert cov.nodes_unreached == ["tensor::float_exp::Exp"]  # the catalog reaches it, these programs did not
    assert cov.nodes_unreachable == ["module::Conv2DWithBias"]  # no catalog op does
    without = summarise(m, {0}, source="test", programs=1)
    assert not without.catalog_known and without.nodes_unreached == ["module::Conv2DWithBias", "tensor::float_exp::Exp"]


def test_the_json_round_trips_and_the_report_reads_it(tmp_path: Path) -> None:
    cov = summarise(_map(), {0, 6}, source="test", programs=3, catalog={"add": {"tensor::float_add::Add"}})
    path = tmp_path / "cov.json"
    path.write_text(json.dumps(cov.to_dict()))
    assert is_coverage(path) and not is_coverage(tmp_path / "missing.json")
    [(p, again)] = load_coverages([path])
    assert again == cov and isinstance(again, Coverage)
    html = coverage_section(p, again, 0)
    assert 'class="bar"' in html and "tensor::float_exp::Exp" in html and "no catalog op reaches them" in html
