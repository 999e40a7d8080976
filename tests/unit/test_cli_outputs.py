"""The files and directories a command writes are checked before it starts its work: a path it
cannot write is an exit-2 error naming the option and the path, and nothing ran (each of these
once ran the whole command and then failed with a traceback, its results lost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.cli import main


def _summary(tmp_path: Path) -> Path:
    from difftest.findings.summary import Summary

    path = tmp_path / "shard.json"
    path.write_text(json.dumps(Summary(programs=3, seconds=1.0).to_dict()))
    return path


# {dir}: an existing directory; {long}: a file name past the file system's 255 bytes
COMMANDS = {
    "fuzz": ["fuzz", "--programs", "1", "-j", "1", "--corpus", "{tmp}/corpus", "--json", "{out}"],
    "merge": ["merge", "{summary}", "--json", "{out}"],
    "coverage": ["coverage", "--programs", "1", "--no-catalog", "--json", "{out}"],
    "suspects": ["suspects", "{case}", "--programs", "0", "--json", "{out}"],
    "report": ["report", "{summary}", "-o", "{out}"],
    "run-svg": ["run", "{case}", "--svg", "{out}"],
}
OUTPUTS = {"directory": ("{tmp}/outdir", "is a directory"),
           "proc": ("/proc/difftest-nowhere.json", "cannot write in /proc"),
           "name-too-long": ("{tmp}/" + "a" * 300 + ".json", "File name too long")}


@pytest.mark.parametrize("output", sorted(OUTPUTS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_that_cannot_be_written_stops_the_command_before_it_runs(
        command: str, output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "outdir").mkdir()
    out, message = (text.format(tmp=tmp_path) for text in OUTPUTS[output])
    case = Path(__file__).parents[2] / "corpus/bugs/chunk-uneven-pieces-panics.json"
    argv = [a.format(tmp=tmp_path, out=out, summary=_summary(tmp_path), case=case) for a in COMMANDS[command]]
    assert main(argv) == 2
    captured = capsys.readouterr()
    flag = {"report": "--output", "run-svg": "--svg"}.get(command, "--json")
    assert f"{flag} {out}: " in captured.err and message in captured.err, captured.err
    assert "Traceback" not in captured.err
    assert captured.out == "", "the command ran before it found it cannot write its output"


def test_an_output_file_that_exists_is_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check of an output file does not change it (a command that stops for another reason
    must not have truncated the user's file)."""
    out = tmp_path / "merged.json"
    out.write_text("the user's")
    assert main(["merge", str(tmp_path / "nowhere.json"), "--json", str(out)]) == 2
    assert out.read_text() == "the user's"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".difftest-write-check-")]


CASE = Path(__file__).parents[2] / "corpus/bugs/chunk-uneven-pieces-panics.json"


@pytest.mark.parametrize(("where", "message"), [
    ("project", "holds files difftest did not write (Cargo.toml, src/main.rs)"),
    ("file", "not a directory"),
    ("/proc/difftest-nowhere", "cannot write in /proc/difftest-nowhere"),
], ids=["a-project-of-the-users", "a-file", "unwritable"])
def test_show_cargo_refuses_a_directory_it_must_not_or_cannot_write(
        where: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The user's Cargo.toml was replaced; a file or an unwritable place was a traceback after
    the case ran."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "Cargo.toml").write_text("[package]\nname = \"mine\"\n")
    (project / "src" / "main.rs").write_text("fn main() {}\n")
    (tmp_path / "file").write_text("")
    target = where if where.startswith("/") else str(tmp_path / where)
    assert main(["show", str(CASE), "--cargo", target]) == 2
    captured = capsys.readouterr()
    assert f"--cargo {target}: {message}" in captured.err and "Traceback" not in captured.err, captured.err
    assert (project / "Cargo.toml").read_text() == "[package]\nname = \"mine\"\n"
    assert captured.out == ""


def test_show_cargo_writes_a_case_whose_name_is_longer_than_a_file_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 300-character case name made a test file name the file system refuses; the project is
    written again over one difftest wrote (and cargo built: Cargo.lock, target/)."""
    doc = json.loads(CASE.read_text())
    doc["name"] = "chunk-" + "x" * 294
    case = tmp_path / "long.json"
    case.write_text(json.dumps(doc))
    project = tmp_path / "p"
    assert main(["show", str(case), "--cargo", str(project)]) == 0, capsys.readouterr().err
    (project / "Cargo.lock").write_text("# cargo's\n")
    (project / "target" / "release").mkdir(parents=True)
    (project / "target" / "release" / "x").write_text("")
    assert main(["show", str(case), "--cargo", str(project)]) == 0, capsys.readouterr().err
    tests = list((project / "tests").iterdir())
    assert len(tests) == 1 and len(tests[0].name) <= 70, tests
    assert "fn chunk_" + "x" * 294 in tests[0].read_text()  # the test keeps the case's whole name
    assert "wrote" in capsys.readouterr().out
