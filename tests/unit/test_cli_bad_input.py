"""Bad input to the command line: a clear message naming the file and the statement, exit 2, no
traceback, and no worker started (these run without a built interpreter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from difftest.cli import main


def _leaf(ident: str, shape: list[int], data: list[float]) -> dict[str, Any]:
    return {"id": ident, "kind": "leaf", "shape": shape, "data": data, "device": "autodiff", "require_grad": True}


def _gather(indices: Any) -> dict[str, Any]:
    return {"id": "v", "kind": "op", "op": "gather", "inputs": ["x"], "attrs": {"dim": 0, "indices": indices}}


def _op(op: str, **attrs: Any) -> dict[str, Any]:
    return {"id": "v", "kind": "op", "op": op, "inputs": ["x"], "attrs": attrs}


def _program(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"format": "difftest-program", "version": 1, "statements": list(statements)}


CASES: dict[str, tuple[Any, str]] = {
    "unknown-op": (_program(_leaf("x", [2], [1.0, 2.0]), {"id": "v", "kind": "op", "op": "frob", "inputs": ["x"]}),
                   "statement 1 (id 'v'): unknown op 'frob'"),
    "wrong-shapes": (_program(_leaf("x", [2, 3], [0.0] * 6), _leaf("y", [4, 3], [0.0] * 12),
                              {"id": "v", "kind": "op", "op": "add", "inputs": ["x", "y"]}),
                     "statement 2 (id 'v'): shapes [2, 3] and [4, 3] do not broadcast"),
    "short-data": (_program(_leaf("x", [2], [1.0])), "statement 0 (id 'x'): data has 1 elements"),
    "case-without-status": ({"format": "difftest-case", "version": 1}, "missing field"),
    # found by mutating corpus programs field by field (each raised a TypeError, a
    # FileNotFoundError or PyTorch's own RuntimeError before)
    "version-true": ({**_program(_leaf("x", [2], [1.0, 2.0])), "version": True},
                     "unsupported format version True"),
    "index-tensor-data-not-a-list": (_program(_leaf("x", [2], [1.0, 2.0]), _gather({"shape": [2], "data": 1})),
                                     "attribute 'indices'={'shape': [2], 'data': 1} is not of type int_tensor"),
    "index-tensor-shape-not-ints": (_program(_leaf("x", [2], [1.0, 2.0]), _gather({"shape": [{"a": 1}], "data": [0]})),
                                    "is not of type int_tensor"),
    # a one-tap kernel: any dilation fits the shapes, but PyTorch's convolution takes an int32
    "attribute-int-beyond-int32": (_program(_leaf("x", [1, 1, 2], [1.0, 2.0]), _leaf("w", [1, 1, 1], [1.0]),
                                            {"id": "v", "kind": "op", "op": "conv1d", "inputs": ["x", "w"],
                                             "attrs": {"stride": [1], "padding": [0], "dilation": [10**12],
                                                       "groups": 1}}),
                                   "statement 2 (id 'v'): conv1d: attribute 'dilation' holds 1000000000000, "
                                   "beyond the 32-bit range"),
    # an integer too large for a float (Python's float() raised OverflowError), quoted by length
    "data-integer-beyond-float64": (_program(_leaf("x", [2], [10**400, 2.0])),
                                    "statement 0 (id 'x'): data[0]: an integer of 401 digits is beyond the float64 "
                                    "range"),
    # scalars the op's dtype cannot hold: PyTorch refuses some (clamp), computes with others
    "float-attribute-beyond-float32": (_program(_leaf("x", [2], [1.0, 2.0]), _op("clamp_min", min=1e39)),
                                       "op 'clamp_min': attribute 'min' (1e+39) is beyond the float32 range"),
    "float-attribute-beyond-float16": ({**_program(_leaf("x", [2], [1.0, 2.0]), _op("add_scalar", scalar=70000)),
                                        "dtype": "float16"},
                                       "op 'add_scalar': attribute 'scalar' (70000) is beyond the float16 range"),
    "huge-integer-attribute-quoted-by-length": (_program(_leaf("x", [2], [1.0, 2.0]), _op("clamp_max", max=10**400)),
                                                "attribute 'max' (an integer of 401 digits) is beyond"),
    # bounds on which the frameworks define clamp differently
    "clamp-bounds-crossed": (_program(_leaf("x", [2], [1.0, 2.0]), _op("clamp", min=2.0, max=1.0)),
                             "statement 1 (id 'v'): clamp: min=2.0 above max=1.0 is not compared"),
    "clamp-nan-bound": (_program(_leaf("x", [2], [1.0, 2.0]), _op("clamp_min", min="NaN")),
                        "statement 1 (id 'v'): clamp_min: a NaN min bound is not compared"),
    "leaky-relu-non-finite-slope": (_program(_leaf("x", [2], [0.0, 2.0]), _op("leaky_relu", slope="Infinity")),
                                    "statement 1 (id 'v'): leaky_relu: a non-finite slope (inf) is not compared"),
    "softplus-zero-beta": (_program(_leaf("x", [2], [0.0, 2.0]), _op("softplus", beta=0)),
                           "statement 1 (id 'v'): softplus: beta = 0 is not compared"),
    "case-name-not-a-string": ({"format": "difftest-case", "version": 1, "status": "pass", "name": {"a": 1},
                                "program": _program(_leaf("x", [2], [1.0, 2.0]))}, '"name" must be a string'),
    "case-status-not-a-string": ({"format": "difftest-case", "version": 1, "status": ["bug"], "reason": "r",
                                  "program": _program(_leaf("x", [2], [1.0, 2.0]))}, "status ['bug'] is not a string"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_run_names_what_is_wrong(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, message = CASES[name]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err, err
    assert "Traceback" not in err


def test_run_reads_malformed_json_as_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.json"
    path.write_text('{"format": "difftest-prog')
    assert main(["run", str(path)]) == 2
    assert "Unterminated string" in capsys.readouterr().err


def test_show_of_a_corrupt_case_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "case.json"
    path.write_text(json.dumps({"format": "difftest-case", "version": 1}))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: missing field" in err and "Traceback" not in err


def test_run_reads_bytes_that_are_not_utf8_as_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe{}")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "utf-8" in err and "Traceback" not in err


@pytest.mark.parametrize(("content", "message"), [
    (b"\xff\xfe", "not UTF-8: 'utf-8' codec"),
    (b'{"format": "difftest-campaign', "malformed JSON: Unterminated string"),
    (b"[]", "not a campaign summary"),
    (b'{"format": "difftest-campaign-summary", "programs": "many", "seconds": 1}',
     '"programs" must be a count (an integer >= 0), got \'many\''),
], ids=["binary", "cut", "list", "wrong-type"])
def test_merge_names_the_summary_that_cannot_be_read(content: bytes, message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shard.json"
    path.write_bytes(content)
    assert main(["merge", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and message in err and "Traceback" not in err, err


def _summary(**fields: Any) -> dict[str, Any]:
    from difftest.findings.summary import Finding, Summary

    s = Summary(programs=10, seconds=1.0)
    s.findings["x:y"] = Finding("x:y", "value", 1, 3)
    return {**s.to_dict(), **fields}


# each raised a TypeError or AttributeError inside merge or report before (found by mutating a
# campaign's summary field by field); now the field is named when the summary is read
@pytest.mark.parametrize(("fields", "message"), [
    ({"ops": {"add": [0]}}, '"ops" must map names to counts'),
    ({"skipped": {"value: random": -1}}, '"skipped" must map names to counts'),
    ({"errors": [1]}, '"errors" must be a list of strings'),
    ({"throughput": [None]}, '"throughput" must be a list of objects'),
    ({"findings": [1]}, '"findings" must be a list of objects'),
    ({"findings": [{"signature": "s", "path": {}}]}, '"findings[].path" must be a string or null'),
    ({"findings": [{"signature": "s", "first": "3"}]}, '"findings[].first" must be an integer or null'),
    ({"guided": {"mutations": ["replace"]}}, '"guided.mutations" must map names to counts'),
    ({"backends": {"flex": {"verdicts": {"pass": "many"}}}}, '"backends[].verdicts" must map names to counts'),
], ids=["ops", "skipped", "errors", "throughput", "findings", "path", "first", "guided", "backends"])
def test_merge_and_report_name_a_summary_field_of_the_wrong_type(fields: dict[str, Any], message: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "shard.json"
    path.write_text(json.dumps(_summary(**fields)))
    for command in (["merge", str(path)], ["report", str(path), "-o", str(tmp_path / "r.html")]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert str(path) in err and message in err and "Traceback" not in err, (command, err)


def test_a_summary_as_written_is_read_back(tmp_path: Path) -> None:
    from difftest.findings.summary import Summary

    doc = _summary()
    assert Summary.from_dict(doc).to_dict() == doc


def test_coverage_reads_its_cases_before_it_builds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a corrupt case stops the command before the (long, first-time) coverage build starts
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"[]")
    assert main(["coverage", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not a difftest case" in err and "building" not in err and "Traceback" not in err


@pytest.mark.parametrize(("argv", "message"), [
    (["fuzz", "--programs", "3", "--corpus", "/proc/difftest-nowhere"], "cannot write in /proc/difftest-nowhere"),
    (["fuzz", "--programs", "3", "--json", "/proc/difftest-nowhere/s.json"], "cannot write in /proc/difftest-nowhere"),
], ids=["corpus-unwritable", "json-unwritable"])  # budgets: test_cli_options.py
def test_fuzz_refuses_what_would_lose_its_findings_before_it_runs(argv: list[str], message: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # checked before any worker starts: a campaign whose findings cannot be saved never begins
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_replay_names_a_path_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "nowhere")]) == 2
    assert f"not found: {tmp_path / 'nowhere'}" in capsys.readouterr().err
    assert main(["replay", str(tmp_path)]) == 2
    assert f"no corpus cases (*.json) in {tmp_path}" in capsys.readouterr().err


@pytest.mark.parametrize(("data", "message"), [
    ("[1.0, NaN]", 'bare NaN is not JSON: write it as the string "NaN"'),
    ("[-Infinity, 2.0]", 'bare -Infinity is not JSON'),
    ("[1e309, 2.0]", "1e309 is beyond the float64 range"),
], ids=["nan", "infinity", "overflow"])
def test_run_refuses_non_finite_data_python_json_would_invent(data: str, message: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # non-finite data is written as the strings the format defines; a bare NaN (accepted by
    # Python's json alone) or a number that overflows float64 would silently become one
    path = tmp_path / "nonfinite.json"
    path.write_text('{"format": "difftest-program", "version": 1, "statements": [{"id": "x", "kind": "leaf", '
                    f'"shape": [2], "data": {data}, "device": "autodiff", "require_grad": true}}]}}')
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err, err
    case = tmp_path / "case.json"
    case.write_text(path.read_text().replace('"difftest-program"', '"difftest-case"'))
    assert main(["show", str(case)]) == 2
    assert f"{case}: malformed JSON: " in capsys.readouterr().err


def test_a_memory_case_beyond_the_size_limits_is_malformed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A memory case asking for a 10^12 x 10^12 matrix once raised OverflowError while loading
    (and one of 10^5 would have allocated for minutes)."""
    doc = json.loads((Path(__file__).parents[2] / "corpus/seed/memory-table.json").read_text())
    doc["memory"]["quick"]["n"] = 10**5
    path = tmp_path / "memory.json"
    path.write_text(json.dumps(doc))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert '"memory.quick.n" is 100000; the limit is 4096' in err and "Traceback" not in err, err


@pytest.mark.parametrize(("args", "message"), [
    (["--programs", "-4"], "--programs must not be negative, got -4"),  # ran nothing and exited 0 before
    (["--campaign", "{merged}"], "a merged summary; give the shards' summaries one at a time"),
    (["--campaign", "{bad}"], '"programs" must be a count'),
], ids=["negative", "merged", "bad-field"])
def test_coverage_refuses_bad_arguments_before_it_builds(args: list[str], message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "merged.json").write_text(json.dumps(_summary(shards_merged=2)))
    (tmp_path / "bad.json").write_text(json.dumps(_summary(programs="x")))
    args = [a.format(merged=tmp_path / "merged.json", bad=tmp_path / "bad.json") for a in args]
    assert main(["coverage", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_merge_names_the_case_files_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """They were left out silently (a shard's corpus with a truncated case merged as if it had
    none)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "empty.json").write_text("")
    (corpus / "dir.json").mkdir()
    assert main(["merge", str(corpus)]) == 0
    out = capsys.readouterr().out
    for name, why in (("empty.json", "malformed JSON"), ("dir.json", "Is a directory")):
        assert f"a case file that cannot be read, left out: {corpus / name}: " in out and why in out, out


@pytest.mark.parametrize("command", ["show", "run"])
def test_a_file_with_a_byte_order_mark_is_refused_by_name(command: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """difftest-burn refuses a program that starts with a byte-order mark (JSON has none), so
    difftest does too, saying so, rather than accept a file the other side cannot run."""
    case = Path(__file__).parents[2] / "corpus/bugs/chunk-uneven-pieces-panics.json"
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + case.read_bytes())  # as some editors save UTF-8
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: the file starts with a UTF-8 byte-order mark" in err and "Traceback" not in err, err


@pytest.mark.parametrize(("change", "message"), [
    ({"crates": "x"}, '"crates" must map names to objects'),
    ({"files": {"burn-nn/src/lib.rs": {"edges": [1], "edges_total": 1, "lines": 1, "lines_total": 1}}},
     '"files.burn-nn/src/lib.rs.edges" must be a count'),
    ({"backward": {"reached": ["a"], "unreached": [1], "unreachable": []}}, '"backward.unreached" must be a list'),
], ids=["crates", "tally", "nodes"])
def test_report_names_a_coverage_field_of_the_wrong_type(change: dict[str, Any], message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Each raised AttributeError inside the report before (found by mutating a coverage summary)."""
    from difftest.findings.coverage import Coverage, Tally

    doc = Coverage("2 programs", 2, {"burn-nn": Tally(1, 2, 1, 2)}, {}, ["a"], [], []).to_dict()
    path = tmp_path / "cov.json"
    path.write_text(json.dumps({**doc, **change}))
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and "Traceback" not in err, err


def test_fuzz_refuses_a_crash_injection_that_is_not_a_program_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DIFFTEST_JOB_CRASH_AT", "x")  # a traceback from inside the campaign before
    assert main(["fuzz", "--programs", "3", "--corpus", str(tmp_path / "corpus")]) == 2
    err = capsys.readouterr().err
    assert "DIFFTEST_JOB_CRASH_AT='x' is not a program index" in err and "Traceback" not in err, err


def test_a_build_cache_that_is_not_a_directory_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    monkeypatch.setenv("DIFFTEST_BURN_VERSIONS_DIR", str(not_a_dir))  # NotADirectoryError traceback before
    monkeypatch.delenv("DIFFTEST_BURN_COVERAGE", raising=False)
    assert main(["coverage", "--programs", "1", "--no-catalog"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the build directory {not_a_dir}/" in err and "Traceback" not in err, err
