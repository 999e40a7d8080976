"""Programs as pictures: the DOT text of a program with its verdict, and its SVG."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from difftest.cli import main
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.picture import DOT_MISSING, dot, svg
from difftest.oracle.check import check
from tests.programs import backward, leaf, op, program

SEED = Path(__file__).resolve().parents[2] / "corpus" / "seed" / "side-branch-detach.json"
EXP = program(leaf("x", [0.5, -1.25, 2.0, 0.25], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"))
NO_DOT = "Graphviz's `dot` is not installed (apt-get install graphviz; see README.md, `difftest run --svg`)"


def _node(text: str, ident: str) -> str:
    found = re.search(rf'^\s*"{ident}" \[(.*)\];$', text, re.M)
    assert found, f"no node {ident} in\n{text}"
    return found.group(1)


def test_side_branch_detach_has_a_dashed_cut_edge(burn_worker: BurnWorker) -> None:
    text = dot(check(load_case(SEED).program, burn_worker))
    assert text.startswith("digraph program {")
    assert '"x10" -> "side" [style="dashed", label="cut"];' in text
    assert '"x" -> "xw" [style="solid"];' in text
    assert '"loss" -> "bw" [style="bold"' in text
    assert "peripheries=2" in _node(text, "x") and 'style="bold"' in _node(text, "x")
    assert "bold" not in _node(text, "side")
    assert "red" not in text and "cluster" not in text


def test_a_region_is_a_cluster(burn_worker: BurnWorker) -> None:
    prog = program(leaf("x", [1.0, 2.0], rg=True), op("y", "exp", "x", region="no_grad"),
                   op("z", "mul", "x", "x"), op("s", "sum", "z"), backward("s"))
    text = dot(check(prog, burn_worker))
    cluster = re.search(r"subgraph cluster_\w*no_grad \{(.*?)\n  \}", text, re.S)
    assert cluster, text
    assert '"y"' in cluster.group(1) and '"z"' not in cluster.group(1)
    assert '"x" -> "y" [style="dashed", label="cut"];' in text  # tracked input, untracked value


def test_a_finding_is_red() -> None:
    with BurnWorker(fault="grad-scale:exp:1e-2") as w:
        verdict = check(EXP, w)
    assert not verdict.ok
    text = dot(verdict)
    marked = [st.id for st in EXP.statements if 'color="red"' in _node(text, st.id)]
    assert marked and set(marked) <= {m.statement for m in verdict.findings}
    assert "! finding" in text


def test_svg(burn_worker: BurnWorker, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("dot") is None:
        pytest.skip(NO_DOT)
    text = dot(check(load_case(SEED).program, burn_worker))
    assert "<svg" in svg(text)
    out = tmp_path / "p.svg"
    assert main(["run", str(SEED), "--svg", str(out)]) == 0
    assert "<svg" in out.read_text()


def test_svg_without_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["run", str(SEED), "--svg", str(tmp_path / "p.svg")]) == 2
    assert DOT_MISSING in capsys.readouterr().err
    assert not (tmp_path / "p.svg").exists()
