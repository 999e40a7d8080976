"""Coverage tallies and backward-node lists from an edge map (difftest/findings/coverage.py),
on a small hand-made map and source tree; the report's coverage section."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.exec.coverage_map import EdgeMap
from difftest.findings.coverage import Coverage, all_nodes, backward_nodes, node_at, summarise
from difftest.findings.report_coverage import coverage_section, is_coverage, load_coverages

TENSOR_RS = """\
fn float_add() {
    struct Add;
    impl<B: Backend> Backward<B, 2> for Add {
        fn backward(self) {
            binary(|g| g);
        }
    }
}
fn float_exp() {
    struct Exp;
    impl<B: Backend> Backward<B, 1> for Exp {
        fn backward(self) {}
    }
}
"""
MODULE_RS = """\
impl<B: Backend> Backward<B, 3> for Conv2DWithBias {
    fn backward(self) {}
}
impl<B: Backend> Backward<B, 1> for AvgPool1D {
    fn backward(self) {}
}
"""


def _map(tmp_path: Path) -> EdgeMap:
    src = tmp_path / "registry" / "burn-autodiff-0.22.1" / "src"
    (src / "ops").mkdir(parents=True)
    (src / "ops" / "tensor.rs").write_text(TENSOR_RS)
    (src / "ops" / "module.rs").write_text(MODULE_RS)
    files = [str(src / "ops" / "tensor.rs"), str(tmp_path / "registry/burn-flex-0.22.1/src/ops/add.rs"),
             "/work/rust/src/exec.rs", str(src / "ops" / "module.rs"), str(src / "ops" / "base.rs")]
    functions = ["backward<2>", "backward<1>", "add", "run", "binary<B>"]
    #     edge:         0   1   2   3  4  5  6   7
    file = [0, 0, 0, 1, 1, 2, 3, 4]
    line = [4, 5, 12, 5, 6, 1, 2, 30]
    function = [0, 0, 1, 2, 2, 3, 1, 4]
    backward_file = [0, 0, 0, -1, -1, -1, 3, 0]  # edge 7: a helper (base.rs) inlined into Add's backward
    backward_line = [4, 5, 12, 0, 0, 0, 2, 5]
    return EdgeMap(files, functions, file, line, function, backward_file, backward_line)


def test_nodes_come_from_the_source(tmp_path: Path) -> None:
    m = _map(tmp_path)
    assert node_at(m.files[0], 5) == "tensor::Add" and node_at(m.files[0], 12) == "tensor::Exp"
    assert node_at(m.files[0], 1) is None and node_at(m.files[0], 8) is None  # outside the impl blocks
    assert all_nodes(m) == {"tensor::Add", "tensor::Exp", "module::Conv2DWithBias", "module::AvgPool1D"}
    assert backward_nodes(m) == {"tensor::Add", "tensor::Exp", "module::Conv2DWithBias"}  # compiled in
    assert backward_nodes(m, {7}) == {"tensor::Add"}
    assert backward_nodes(m, {3, 5}) == set()  # burn-flex and the interpreter: no node


def test_an_edge_without_a_backward_frame_belongs_to_the_impl_block_it_lies_in(tmp_path: Path) -> None:
    """The line tables name no function for some edges of a backward (Floor's prologue, whose
    closure LLVM merges with Ceil's and Round's): the edge's own line in the impl block says whose."""
    m = _map(tmp_path)
    m.file.append(3)  # module.rs, line 5: inside AvgPool1D's impl block
    m.line.append(5)
    m.function.append(-1)
    m.backward_file.append(-1)
    m.backward_line.append(0)
    assert backward_nodes(m, {8}) == {"module::AvgPool1D"}
    assert "module::AvgPool1D" in backward_nodes(m)


def test_tallies_count_burn_edges_and_lines_per_crate_and_file(tmp_path: Path) -> None:
    cov = summarise(_map(tmp_path), {0, 3, 5}, source="test", programs=2)
    assert cov.crates["burn-autodiff"].to_dict() == {"edges": 1, "edges_total": 5, "lines": 1, "lines_total": 5}
    assert cov.crates["burn-flex"].to_dict() == {"edges": 1, "edges_total": 2, "lines": 1, "lines_total": 2}
    assert set(cov.crates) == {"burn-autodiff", "burn-flex"}  # the interpreter's edge is no crate of burn
    assert cov.files["burn-autodiff/src/ops/tensor.rs"].edges_total == 3


def test_backward_nodes_split_by_the_catalogs_reach(tmp_path: Path) -> None:
    m = _map(tmp_path)
    catalog = {"add": {"tensor::float_add::Add", "tensor::Add"}, "exp": {"tensor::Exp"}}
    cov = summarise(m, {0}, source="test", programs=1, catalog=catalog)
    assert cov.nodes_reached == ["tensor::Add"]
    assert cov.nodes_unreached == ["tensor::Exp"]  # the catalog reaches it, these programs did not
    assert cov.nodes_unreachable == ["module::Conv2DWithBias"]  # no catalog op does
    assert cov.extra["no_edges"] == ["module::AvgPool1D"]  # declared, no edge of its own: not measured
    without = summarise(m, {0}, source="test", programs=1)
    assert not without.catalog_known
    assert without.nodes_unreached == ["module::Conv2DWithBias", "tensor::Exp"]


def test_the_json_round_trips_and_the_report_reads_it(tmp_path: Path) -> None:
    cov = summarise(_map(tmp_path), {0, 6}, source="test", programs=3, catalog={"add": {"tensor::Add"}})
    path = tmp_path / "cov.json"
    path.write_text(json.dumps(cov.to_dict()))
    assert is_coverage(path) and not is_coverage(tmp_path / "missing.json")
    [(p, again)] = load_coverages([path])
    assert again == cov and isinstance(again, Coverage)
    html = coverage_section(p, again, 0)
    assert 'class="bar"' in html and "tensor::Exp" in html and "no catalog op reaches them" in html
