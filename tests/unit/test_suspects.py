"""Spectrum-based localisation of findings (difftest/findings/suspects.py) on synthetic runs:
which burn lines each run executed and whether it failed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from difftest.findings.report_coverage import is_suspects, load_suspects, suspects_section
from difftest.findings.suspects import SUSPECTS_FORMAT, Line, Run, Spectrum, group


def lines(*names: str) -> frozenset[Line]:
    return frozenset(Line("burn-autodiff", f"src/{n}.rs", 1) for n in names)


def passing(label: str, *names: str) -> Run:
    return Run(label, False, lines("engine", *names))


def failing(label: str, *names: str, finding: str | None = None) -> Run:
    return Run(label, True, lines("engine", *names), finding)


def test_ochiai_is_one_for_a_line_every_failing_run_and_no_passing_run_executes() -> None:
    runs = [failing("a", "fault"), failing("b", "fault", "x"), failing("c", "fault", "x", "y")]
    s = Spectrum.of(runs + [passing(f"p{k}", "y") for k in range(5)] + [passing("q", "x")])
    (fault,) = lines("fault")
    (x,) = lines("x")
    assert s.score(fault) == 1.0
    assert math.isclose(s.score(x), 2 / math.sqrt(3 * 3))
    assert s.score(next(iter(lines("never")))) == 0.0


def test_a_line_that_does_not_raise_the_failure_rate_is_no_suspect() -> None:
    """The engine runs in every program; `y` runs in as many passing programs, in proportion, as
    failing ones. Neither is a suspect however many failing runs execute them."""
    runs = [failing("a", "y"), failing("b")] + [passing(f"p{k}", *(["y"] if k % 2 else [])) for k in range(4)]
    s = Spectrum.of(runs)
    assert s.score(next(iter(lines("engine")))) == 0.0
    assert s.score(next(iter(lines("y")))) == 0.0


def test_findings_of_one_shared_fault_are_one_group_at_the_fault() -> None:
    """Three ops go through a faulty helper; each op's own code also runs in passing programs."""
    runs = [failing(op, op, "helper", finding=op) for op in ("square", "silu", "hypot")]
    sample = [passing(f"{op} ok", op) for op in ("square", "silu", "hypot", "add")]
    groups, unplaced = group(Spectrum.of(runs + sample), runs)
    assert unplaced == []
    assert len(groups) == 1
    assert groups[0].findings == ["hypot", "silu", "square"]
    assert [s.line for s in groups[0].site] == sorted(lines("helper"), key=str)
    assert groups[0].strict


def test_two_faults_in_two_ops_stay_two_groups() -> None:
    runs = [failing("sqrt", "sqrt", finding="sqrt"), failing("div", "div", "reduce", finding="div"),
            failing("add", "add", "reduce", finding="add")]
    sample = [passing("div ok", "div"), passing("add ok", "add")]
    groups, _ = group(Spectrum.of(runs + sample), runs)
    assert sorted(g.findings for g in groups) == [["add", "div"], ["sqrt"]]
    by = {tuple(g.findings): g for g in groups}
    assert {s.line for s in by[("add", "div")].site} == set(lines("reduce"))
    assert {s.line for s in by[("sqrt",)].site} == set(lines("sqrt"))


def test_a_site_that_passing_runs_execute_too_is_weaker_evidence() -> None:
    runs = [failing("a", "hot", finding="a")]
    groups, _ = group(Spectrum.of(runs + [passing("p", "hot")] + [passing(f"q{k}") for k in range(5)]), runs)
    assert not groups[0].strict


def test_a_finding_whose_run_executed_no_burn_code_is_not_placed() -> None:
    runs = [Run("panic", True, frozenset(), "panic"), failing("a", "x", finding="a")]
    groups, unplaced = group(Spectrum.of(runs), runs)
    assert unplaced == ["panic"]
    assert [g.findings for g in groups] == [["a"]]


def test_a_fault_of_one_op_is_not_placed_at_a_shared_fault_many_more_runs_show() -> None:
    """The shared fault fails 40 runs; `sqrt`'s own fault one. Ochiai over all failures would
    rank the engine above sqrt's line (its runs are most of the failing ones); once the shared
    fault's runs are explained, sqrt's line is the place of its finding."""
    shared = [failing(f"s{k}", "helper", finding=f"op{k}") for k in range(40)]
    runs = shared + [failing("sqrt", "sqrt", finding="sqrt"), failing("exp", "exp", finding="exp")]
    sample = [passing(f"p{k}", "sqrt" if k == 0 else "add") for k in range(30)]
    groups, unplaced = group(Spectrum.of(runs + sample), runs)
    assert unplaced == []
    assert [len(g.findings) for g in groups] == [40, 1, 1]
    assert {s.line for s in groups[0].site} == set(lines("helper"))
    places = {g.findings[0]: {s.line for s in g.site} for g in groups[1:]}
    assert places == {"sqrt": set(lines("sqrt")), "exp": set(lines("exp"))}


def test_a_finding_with_no_line_of_its_own_is_unplaced_not_grouped_with_others() -> None:
    """Two findings whose runs executed only code passing runs execute as often (a fault that
    depends on values, not paths) are left unplaced, not grouped at the engine."""
    runs = [failing("a", "div", finding="a"), failing("b", "mul", finding="b")]
    sample = [passing(f"p{k}", "div", "mul") for k in range(20)]
    groups, unplaced = group(Spectrum.of(runs + sample), runs)
    assert groups == []
    assert unplaced == ["a", "b"]


def test_unrelated_findings_whose_top_lines_score_alike_are_not_one_group() -> None:
    """Two findings, each the only run of its own line: equal scores, different runs."""
    runs = [failing("a", "chunk", finding="a"), failing("b", "powi", finding="b")]
    groups, _ = group(Spectrum.of(runs + [passing(f"p{k}") for k in range(10)]), runs)
    assert sorted(g.findings for g in groups) == [["a"], ["b"]]


def _doc(tmp_path: Path) -> Path:
    runs = [failing("a", "helper", finding="case-a"), failing("b", "helper", finding="case-b")]
    groups, _ = group(Spectrum.of(runs + [passing(f"p{k}") for k in range(5)]), runs)
    doc = {"format": SUSPECTS_FORMAT, "burn": "patch:x.patch", "failing_runs": 2, "passing_runs": 5,
           "groups": [g.to_dict() for g in groups], "unplaced": ["case-c"],
           "cases": {"case-a": {"path": str(tmp_path / "a.json"), "label": "case-a (burn-wrong:-:square:grad)"},
                     "case-b": {"path": str(tmp_path / "b.json"), "label": "case-b <silu>"}}}
    path = tmp_path / "suspects.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_report_shows_each_place_with_its_lines_and_links_its_cases(tmp_path: Path) -> None:
    path = _doc(tmp_path)
    assert is_suspects(path)
    ((where, doc),) = load_suspects([path, tmp_path / "other.json"])
    html = suspects_section(where, doc, 0, {str((tmp_path / "a.json").resolve()): "case-1"})
    assert "burn-autodiff/src/helper.rs:1" in html
    assert '<a href="#case-1">case-a (burn-wrong:-:square:grad)</a>' in html
    assert "<li>case-b &lt;silu&gt;</li>" in html  # no section for it in this report: named, escaped
    assert "No burn line to blame: case-c" in html


def test_a_suspects_file_whose_groups_are_not_places_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": SUSPECTS_FORMAT, "groups": [{"findings": "a"}]}))
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_suspects([path])


def test_a_campaign_that_saves_several_findings_prints_the_suspects_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Several findings may be one fault many ops reach: the campaign says how to find out
    (with the --burn it ran); one finding, or a --fault campaign (the fault lives in the
    interpreter, which the coverage build does not count), does not get the line."""
    from difftest.campaign import parallel
    from difftest.cli.main import main
    from difftest.findings.summary import Summary

    found = tmp_path / "corpus" / "findings"
    saved: list[str] = []

    def fake_fuzz(opts: object, console: object) -> Summary:
        return Summary(programs=1, saved=list(saved))

    monkeypatch.setattr(parallel, "fuzz", fake_fuzz)
    saved[:] = [str(found / "a.json"), str(found / "b.json")]
    main(["fuzz", "--programs", "1", "-j", "1", "--corpus", str(tmp_path / "corpus")])
    assert f"one place per fault: difftest suspects {found}\n" in capsys.readouterr().out
    main(["fuzz", "--programs", "1", "-j", "1", "--corpus", str(tmp_path / "corpus"), "--fault", "grad-scale:exp:1e-3"])
    assert "difftest suspects" not in capsys.readouterr().out
    saved[:] = [str(found / "a.json")]
    main(["fuzz", "--programs", "1", "-j", "1", "--corpus", str(tmp_path / "corpus")])
    assert "difftest suspects" not in capsys.readouterr().out


def test_a_report_of_a_broken_suspects_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from difftest.cli.main import main

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"format": SUSPECTS_FORMAT, "groups": "none"}))
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not a list of places" in err and "Traceback" not in err, err
