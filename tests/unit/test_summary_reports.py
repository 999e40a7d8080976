"""A campaign that saved new cases ends with the command that writes each one's bug report,
carrying what the campaign ran against (its fault, its burn build) so the report reproduces it."""

from __future__ import annotations

import io

from rich.console import Console

from difftest.findings.summary import REPORTS_LISTED, Summary, print_summary

SIG = "burn-wrong:-:tanh:grad:wrong #a03df2eee981"


def _printed(s: Summary) -> str:
    out = io.StringIO()
    print_summary(s, Console(file=out, width=250))
    return out.getvalue()


def _summary(saved: list[str], **versions: str) -> Summary:
    s = Summary(programs=300, seconds=4.0, seed=0)
    f = s.finding(SIG, "burn-wrong")
    f.count, f.first, f.path = 15, 30, saved[0]
    s.saved = list(saved)
    s.versions = {"burn": "0.22.1", **versions}
    return s


def test_each_new_case_gets_its_report_command() -> None:
    text = _printed(_summary(["corpus/findings/ecbe56195d5129b8.json"]))
    assert "  difftest show corpus/findings/ecbe56195d5129b8.json --issue\n" in text


def test_the_fault_and_the_build_go_with_it() -> None:
    text = _printed(_summary(["corpus/findings/a b.json"], fault="grad-scale:tanh:1e-3", build="patch:fix.patch"))
    want = "difftest show 'corpus/findings/a b.json' --issue --fault grad-scale:tanh:1e-3 --burn patch:fix.patch"
    assert f"  {want}\n" in text


def test_many_cases_are_listed_up_to_a_limit() -> None:
    saved = [f"corpus/findings/{k:016x}.json" for k in range(REPORTS_LISTED + 3)]
    text = _printed(_summary(saved))
    assert sum("difftest show corpus/findings/" in line for line in text.splitlines()) == REPORTS_LISTED
    assert "... and 3 more" in text


def test_no_new_case_no_report_line() -> None:
    s = _summary(["corpus/findings/x.json"])
    s.saved = []
    assert "difftest show" not in _printed(s)


def test_the_module_kinds_drawn_are_listed_apart_from_the_catalog_ops() -> None:
    """The campaign counts module kinds beside the ops (keys "module:<kind>"): the summary
    lists them on a line of their own, not as ops, and merging shards adds them up."""
    s = _summary(["corpus/findings/a.json"])
    s.ops.update({"exp": 7, "add": 3, "module:linear": 5, "module:group_norm": 2})
    text = _printed(s)
    assert "ops generated: 2 distinct; least: add 3, exp 7" in text
    assert "modules generated: linear 5, group_norm 2" in text
    other = Summary(programs=10)
    other.ops.update({"module:group_norm": 4})
    s.absorb(other)
    assert s.module_kinds == {"linear": 5, "group_norm": 6} and s.catalog_ops == {"exp": 7, "add": 3}
