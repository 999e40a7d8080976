"""The JSON files a user gives difftest, read one way (program/files.py): a document nested too
deeply, a byte-order mark, a shape written as a float, a program that is not an object, a case
whose recorded verdict is malformed — each a short error naming the file and what is wrong, the
way a malformed file is, never a traceback, and never silently dropped (these run without a
built interpreter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.cli import main
from difftest.findings.corpus import CorpusError, load_case
from difftest.findings.signature import scan_corpus
from difftest.findings.summary import merge
from difftest.program.files import JsonFileError, read_json
from difftest.program.ir import ProgramError
from difftest.program.jsonio import loads, loads_lenient, program_from_dict
from difftest.pytest_plugin import _case_kind

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "corpus/bugs/chunk-uneven-pieces-panics.json"
DEEP = "[" * 1000 + "]" * 1000
TOO_DEEP = "malformed JSON: nested more than 100 levels deep"


def _deep(directory: Path) -> Path:
    path = directory / "deep.json"
    path.write_text(DEEP + "\n")
    return path


def test_a_deep_document_is_malformed_json_not_a_recursion_error(tmp_path: Path) -> None:
    for read in (loads, loads_lenient):
        with pytest.raises(ValueError, match="nested more than 100 levels deep"):
            read(DEEP)
        with pytest.raises(ValueError, match="nested more than 100 levels deep"):  # parses, but too deep to walk
            read("[" * 500 + "]" * 500)
    assert loads('["[[[[[[", {"a": [[1]]}]') == ["[[[[[[", {"a": [[1]]}]  # brackets in strings do not nest
    path = _deep(tmp_path)
    with pytest.raises(JsonFileError, match=f"{path}: {TOO_DEEP}"):
        read_json(path)
    with pytest.raises(CorpusError, match=f"{path}: {TOO_DEEP}"):
        load_case(path)
    assert _case_kind(path) is None  # pytest collects it; its item fails naming it


@pytest.mark.parametrize("command", ["run", "show", "merge"])
def test_commands_given_a_deep_file_name_it(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _deep(tmp_path)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {TOO_DEEP}" in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["suspects", "coverage"])
def test_a_deep_case_in_a_directory_is_named_before_a_build(command: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = _deep(tmp_path)
    (tmp_path / "good.json").write_bytes(CASE.read_bytes())
    assert main([command, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {TOO_DEEP}" in err and "building" not in err and "Traceback" not in err, err


def test_merge_of_a_directory_lists_the_deep_case_and_keeps_the_others(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _deep(tmp_path)
    (tmp_path / "good.json").write_bytes(CASE.read_bytes())
    assert main(["merge", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"a case file that cannot be read, left out: {path}: {TOO_DEEP}" in out, out
    assert [f.path for f in merge([tmp_path]).findings.values()] == [str(tmp_path / "good.json")]


def _new_case(verdict: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CASE.read_text())
    doc["status"] = "new"
    doc.pop("signature", None)
    doc["verdict"] = verdict
    return doc


@pytest.mark.parametrize(("verdict", "why"), [
    ("x", '"verdict" must be an object with "kind" and "mismatches", got \'x\''),
    ({"kind": 5, "mismatches": "x"}, '"verdict.kind" must be text, got 5'),
    ({"kind": "burn-wrong", "mismatches": "x"}, '"verdict.mismatches" must be a list of objects, got \'x\''),
    ({"kind": "burn-wrong", "mismatches": [3]}, '"verdict.mismatches" must be a list of objects, got [3]'),
], ids=["string", "kind-number", "mismatches-string", "mismatch-number"])
def test_merge_lists_a_new_case_whose_verdict_cannot_be_read(verdict: Any, why: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Without a signature its signature comes from the verdict: it was left out silently, as
    if it recorded no finding."""
    path = tmp_path / "new.json"
    path.write_text(json.dumps(_new_case(verdict)))
    assert scan_corpus(tmp_path).unreadable == [f"{path}: {why}"]
    assert main(["merge", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"error: a case file that cannot be read, left out: {path}: {why}" in out, out


def test_a_case_with_a_readable_verdict_is_read(tmp_path: Path) -> None:
    path = tmp_path / "new.json"
    path.write_text(json.dumps(_new_case({"kind": "pass", "mismatches": []})))
    assert load_case(path).status == "new" and scan_corpus(tmp_path).unreadable == []


def _program(**leaf: Any) -> dict[str, Any]:
    return {"format": "difftest-program", "version": 1, "statements": [
        {"id": "w", "kind": "leaf", "shape": [2], "data": [3.0, 4.0], "device": "autodiff", "require_grad": True,
         **leaf},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["w"]},
        {"id": "bw", "kind": "backward", "input": "s"}]}


def test_a_program_that_is_a_list_gets_a_short_error() -> None:
    """The error quoted the whole document back (over a kilobyte for a small program)."""
    doc = [_program()] * 20
    with pytest.raises(ProgramError) as e:
        program_from_dict(doc)
    assert str(e.value) == "the program must be a JSON object, got an array (at /)"


@pytest.mark.parametrize(("change", "message"), [
    ({"shape": [2.0]}, "statement 0 (id 'w'): shape[0] must be an integer, got a number (2.0): write it without "
                       "the fraction (2) (at /statements/0/shape/0)"),
    ({"shape": "2" * 500}, "statement 0 (id 'w'): shape must be an array, got a string ('2222"),
    ({"data": [[1.0] * 500, 2.0]}, "statement 0 (id 'w'): [1.0, 1.0, "),
], ids=["float-shape", "long-string", "long-list"])
def test_schema_errors_are_brief(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProgramError) as e:
        program_from_dict(_program(**change))
    text = str(e.value)
    assert text.startswith(message) and len(text) < 300, text


def test_an_integer_written_as_a_float_is_refused_in_a_module_too() -> None:
    doc = _program()
    doc["statements"][:0] = [{"id": "n", "kind": "module", "module": "group_norm", "num_groups": 1.0,
                              "num_channels": 2, "epsilon": 1e-5, "weight": None, "bias": None}]
    with pytest.raises(ProgramError, match=r"num_groups must be an integer, got a number \(1\.0\)"):
        program_from_dict(doc)


@pytest.mark.parametrize("command", ["run", "show"])
def test_a_float_shape_is_refused_by_run_and_show(command: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """difftest-burn refuses [2.0] as a shape; Python read it as [2] and ran it."""
    path = tmp_path / "p.json"
    program = _program(shape=[2.0])
    path.write_text(json.dumps(program if command == "run" else {**json.loads(CASE.read_text()), "program": program}))
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "shape[0] must be an integer, got a number (2.0)" in err, err


def test_a_byte_order_mark_is_refused_wherever_json_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + CASE.read_bytes())
    for strict in (True, False):
        with pytest.raises(JsonFileError, match=f"{path}: the file starts with a UTF-8 byte-order mark"):
            read_json(path, strict=strict)
    with pytest.raises(CorpusError, match="byte-order mark"):
        load_case(path)
    assert [why.startswith(f"{path}: the file starts with a UTF-8 byte-order mark")
            for why in scan_corpus(tmp_path).unreadable] == [True]
