"""The case paths a command reads are checked before it runs: a path that does not exist, or a
file that is not a `.json` case, is an exit-2 error naming it (they were left out silently and
the command ran on the rest, or on nothing, exit 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from difftest.cli import main

CASE = Path(__file__).parents[2] / "corpus/bugs/chunk-uneven-pieces-panics.json"


@pytest.mark.parametrize("command", [["versions", "--burn", "0.22.1"], ["replay"], ["coverage", "--no-catalog"],
                                     ["suspects", "--programs", "0"]], ids=lambda c: c[0])
@pytest.mark.parametrize(("other", "message"), [
    ("nowhere", "not found: {path}"),
    ("notes.txt", "not a case (*.json) or a directory of cases: {path}"),
], ids=["missing", "not-json"])
def test_a_case_path_that_is_no_case_is_named_before_anything_runs(
        command: list[str], other: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("not a case\n")
    path = tmp_path / other
    assert main([*command, str(CASE), str(path)]) == 2
    captured = capsys.readouterr()
    assert f"difftest {command[0]}: {message.format(path=path)}" in captured.err, captured.err
    assert "Traceback" not in captured.err and captured.out == ""


@pytest.mark.parametrize(("corpus", "message"), [
    ("nowhere", "which does not exist"),
    ("without-bugs", "which does not exist"),
    ("empty-bugs", "which holds no bug case (*.json)"),
], ids=["missing", "without-bugs", "empty-bugs"])
def test_versions_recorded_refuses_a_corpus_without_bug_cases(corpus: str, message: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Its use is `difftest versions --recorded > docs/versions.md`: an empty table, exit 0, would
    have replaced the page."""
    (tmp_path / "without-bugs").mkdir()
    (tmp_path / "empty-bugs" / "bugs").mkdir(parents=True)
    assert main(["versions", "--recorded", "--corpus", str(tmp_path / corpus)]) == 2
    captured = capsys.readouterr()
    assert f"--recorded reads the bug cases of {tmp_path / corpus / 'bugs'}, {message}" in captured.err, captured.err
    assert captured.out == ""


def test_versions_recorded_prints_the_table_of_the_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["versions", "--recorded", "--corpus", str(CASE.parents[1])]) == 0
    assert "| `chunk-uneven-pieces-panics` |" in capsys.readouterr().out
