"""`difftest merge` exits as a campaign does (it always exited 0): 1 when the merged result holds
a finding no known bug explains, 2 on input it cannot merge as given, nothing merged then."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.cli import main

BUG_CASE = Path(__file__).parents[2] / "corpus/bugs/conv1d-grouped-weight-grad-uncropped.json"


def _summary(path: Path, bug: str | None = None, findings: bool = True) -> Path:
    from difftest.findings.summary import Finding, Summary

    s = Summary(programs=10, seconds=1.0)
    if findings:
        s.findings["burn-wrong:-:exp:grad:wrong #1"] = Finding("burn-wrong:-:exp:grad:wrong #1", "burn-wrong", 2, 3,
                                                              bug=bug)
    path.write_text(json.dumps(s.to_dict()))
    return path


def _case(directory: Path, status: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = json.loads(BUG_CASE.read_text())
    doc["status"] = status
    path = directory / f"{status}.json"
    path.write_text(json.dumps(doc))
    return directory


@pytest.mark.parametrize(("inputs", "code"), [
    (["unexplained.json"], 1),
    (["explained.json"], 0),
    (["clean.json"], 0),
    (["clean.json", "new-cases"], 1),  # a campaign's saved finding: news to triage
    (["clean.json", "bug-cases"], 0),  # a recorded bug case: triaged
    (["explained.json", "clean.json"], 0),
], ids=["a-shard-unexplained", "a-shard-explained", "no-findings", "new-case", "bug-case", "two-shards"])
def test_merge_exits_1_on_a_finding_no_known_bug_explains(inputs: list[str], code: int, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _summary(tmp_path / "unexplained.json")
    _summary(tmp_path / "explained.json", bug="powi-zero-untracked")
    _summary(tmp_path / "clean.json", findings=False)
    _case(tmp_path / "new-cases", "new")
    _case(tmp_path / "bug-cases", "bug")
    assert main(["merge", *(str(tmp_path / i) for i in inputs)]) == code
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("inputs", "message"), [
    (["s.json", "s.json"], "{tmp}/s.json is given twice (as {tmp}/s.json and {tmp}/s.json): it would count twice"),
    (["s.json", "sub/../s.json"], "{tmp}/sub/../s.json is given twice"),
    (["cases", "cases/new.json"], "{tmp}/cases/new.json is inside {tmp}/cases, given too"),
    (["empty-dir", "sub"], "no case (*.json) or frontier entry in any: nothing to merge"),
    (["s.json", "empty.json"], "{tmp}/empty.json: an empty file, not a campaign summary"),
    (["s.json", "nowhere"], "not found: {tmp}/nowhere"),
], ids=["same-file", "same-file-spelled-otherwise", "nested", "empty-directory", "empty-file", "missing"])
def test_merge_refuses_input_it_cannot_merge_as_given(inputs: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`merge s.json s.json` counted every program and finding twice; an empty directory or file
    merged as nothing, exit 0."""
    _summary(tmp_path / "s.json", findings=False)
    _case(tmp_path / "cases", "new")
    (tmp_path / "sub").mkdir()
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "empty.json").write_text("")
    out = tmp_path / "merged.json"
    assert main(["merge", *(str(tmp_path / i) for i in inputs), "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert message.format(tmp=tmp_path) in captured.err and "Traceback" not in captured.err, captured.err
    assert captured.out == "" and not out.exists()


def test_a_directory_without_cases_among_others_is_a_shard_that_found_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _summary(tmp_path / "s.json", findings=False)
    (tmp_path / "empty-dir").mkdir()
    assert main(["merge", str(tmp_path / "s.json"), str(tmp_path / "empty-dir")]) == 0
    assert f"{tmp_path}/empty-dir: no case (*.json) in it, nothing merged from it" in capsys.readouterr().err
