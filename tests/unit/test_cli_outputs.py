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

