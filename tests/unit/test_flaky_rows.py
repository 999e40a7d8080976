"""A finding whose first program gives another result in a fresh worker is one nondeterministic
finding: one row of the campaign's table, saying where both observations are, and one line
below it (findings/summary.py `Finding.flaky`); never a second row of its own."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from difftest.findings.summary import Summary, merge, print_summary, write_json

SIG = "torch-wrong:-:graph@permute:grad:nan #a1b54542fc49"
SAVED = ".difftest/flaky/eb73f2e0585bb9ce.json"


def _summary() -> Summary:
    s = Summary(programs=8000, seconds=40.0, seed=31)
    f = s.finding(SIG, "torch-wrong")
    f.count, f.first, f.flaky = 1, 4495, SAVED
    return s


def _printed(s: Summary) -> str:
    out = io.StringIO()
    print_summary(s, Console(file=out, width=250))
    return out.getvalue()


def test_a_flaky_finding_is_one_row_that_says_so() -> None:
    text = _printed(_summary())
    rows = [line for line in text.splitlines() if "a1b54542fc49" in line]
    assert len(rows) == 1, text
    assert "flaky (did not reproduce in a fresh worker)" in rows[0] and SAVED in rows[0]
    assert "1 finding(s) did not reproduce in a fresh worker" in text
    assert "each explained by a known bug" not in text


def test_the_flag_survives_json_and_merge(tmp_path: Path) -> None:
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    write_json(_summary(), paths[0])
    write_json(Summary(programs=10, seconds=1.0, seed=31), paths[1])
    merged = merge(paths)
    assert merged.findings[SIG].flaky == SAVED
    assert len([line for line in _printed(merged).splitlines() if "a1b54542fc49" in line]) == 1


def test_pytorchs_own_flaky_result_fails_no_campaign_and_burns_does() -> None:
    s = _summary()
    assert s.unexplained() and not s.failing()
    assert "1 of them PyTorch's own (torch-wrong), which fail no campaign" in _printed(s)
    burn = s.finding("burn-wrong:-:exp:grad:wrong #0123456789ab", "burn-wrong")
    burn.count, burn.first, burn.flaky = 1, 7, ".difftest/flaky/0123456789abcdef.json"
    assert s.failing() == [burn]
