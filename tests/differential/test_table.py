"""The per-statement table of a verdict: rows, marks, plain-text report, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.cli import main
from difftest.divergences.rules import RULES
from difftest.exec.burn_worker import BurnWorker
from difftest.findings.corpus import load_case
from difftest.findings.table import report as table_report
from difftest.findings.table import rows
from difftest.oracle.check import check
from difftest.program.jsonio import program_to_dict
from tests.programs import backward, leaf, op, program

SEED = Path(__file__).resolve().parents[2] / "corpus" / "seed" / "flags-of-w.json"
EXP = program(leaf("x", [0.5, -1.25, 2.0, 0.25], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"))


def test_flags_of_w_rows(burn_worker: BurnWorker) -> None:
    verdict = check(load_case(SEED).program, burn_worker)
    table = {r["id"]: r for r in rows(verdict)}
    assert [r["burn"] for r in rows(verdict)] == ["T T T", "T T T", "T T F", "T F F", "F F F", "F F F"]
    assert table["w"]["burn"] == "T T T" and table["w_detach"]["burn"] == "T T T"
    assert table["w2_detach"]["burn"] == "T F F" and table["w_without_autodiff"]["burn"] == "F F F"
    assert table["w_detach"]["torch"] == "F T F F"
    assert table["w_detach"]["rules"] == ["leaf-detach (burn)"]
    assert all(not r["marks"] and not r["predicted"] for r in table.values())
    report = table_report(verdict)
    assert "w_detach = detach(w)" in report and "leaf-detach (burn)" in report
    assert "T T T" in report.split("table (", 1)[1]


def test_a_flags_mismatch_shows_the_prediction_and_is_marked(burn_worker: BurnWorker) -> None:
    without = [r for r in RULES if r.name != "leaf-detach"]
    verdict = check(load_case(SEED).program, burn_worker, rules=without)
    row = {r["id"]: r for r in rows(verdict)}["w_detach"]
    assert row["marks"] == {"burn": "!"}
    assert row["predicted"]["burn"] != row["burn_flags"]
    assert "T T T !" in table_report(verdict)


def test_a_wrong_gradient_cell_is_marked() -> None:
    with BurnWorker(fault="grad-scale:exp:1e-2") as w:
        verdict = check(EXP, w)
    assert verdict.kind == "burn-wrong", table_report(verdict)
    table = {r["id"]: r for r in rows(verdict)}
    assert table["x"]["marks"] == {"grad:bw": "!"}
    assert table["y"]["marks"] == {} and table["y"]["grads"]["bw"]["burn"] is None
    grad = table["x"]["grads"]["bw"]
    assert grad["max_rel"] is not None and grad["max_rel"] > 1e-3
    report = table_report(verdict)
    assert report.startswith("verdict: burn-wrong") and "  - grad at statement 0 (x)" in report
    line = next(li for li in report.splitlines() if " ! " in li or li.rstrip().endswith("!") or "! │" in li)
    assert "/" in line


def test_run_json_prints_the_rows(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["run", str(SEED), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in out][:2] == ["w", "w_detach"]
    assert out[3]["burn_flags"] == {"is_autodiff": True, "is_tracked": False, "is_require_grad": False}


def test_a_nan_gradient_difference_is_shown(burn_worker: BurnWorker) -> None:
    """powf at base 0: burn's gradient is NaN, so the difference is NaN (kept JSON-ready as the
    text "nan" by `rows`), which the terminal table prints instead of failing on."""
    case = load_case(SEED.parents[1] / "bugs" / "powf-zero-base-nan-grad.json")
    verdict = check(case.program, burn_worker)
    row = {r["id"]: r for r in rows(verdict)}["b"]
    [grad] = row["grads"].values()
    assert grad["max_abs"] == "nan" and row["marks"]
    assert "nan / nan !" in table_report(verdict)


def test_run_says_which_known_bug_a_failing_program_is(capsys) -> None:  # type: ignore[no-untyped-def]
    case = Path(__file__).parents[2] / "corpus/bugs/powf-scalar-huge-exponent-panics.json"
    assert main(["run", str(case)]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("triage: known bug powf-scalar-huge-exponent-panics: "), last
    assert last.endswith("(its case: corpus/bugs/powf-scalar-huge-exponent-panics.json)"), last


def test_run_signs_a_new_finding_by_the_op_it_localises(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    prog = program(leaf("x", [0.5, 1.0, -1.5], rg=True), op("y", "exp", "x"), op("z", "mul", "y", "x"),
                   op("s", "sum", "z"), backward("s"))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(program_to_dict(prog)))
    assert main(["run", str(path), "--fault", "grad-scale:exp:1e-3"]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("triage: new: burn-wrong:-:exp:grad:wrong "), last
    assert "localised: burn-wrong grad input 0 of exp (statement y)" in last, last
