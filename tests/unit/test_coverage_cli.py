"""`difftest coverage` and `fuzz --guided` refuse bad input before building or starting
anything: exit 2 and a message naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.cli import main


def _err(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_coverage_needs_programs(capsys: pytest.CaptureFixture[str]) -> None:
    assert "give cases, --programs N or --campaign JSON" in _err(["coverage"], capsys)


def test_coverage_of_a_file_that_is_no_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "difftest-case"}))
    assert f"--campaign {path}: {path}: not a campaign summary" in _err(["coverage", "--campaign", str(path)], capsys)


def test_coverage_of_a_directory_without_cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert f"no cases in {tmp_path}" in _err(["coverage", str(tmp_path)], capsys)


def test_guided_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fuzz", "--guided", "--guided-share", "1.5"])
    assert exit_.value.code == 2
    assert "argument --guided-share: must be a share in [0, 1], got '1.5'" in capsys.readouterr().err
    assert "not with --burn or --fault" in _err(["fuzz", "--guided", "--fault", "grad-sign:exp"], capsys)
    bad = tmp_path / "frontier"
    bad.write_text("")
    assert f"{bad}: a frontier must be a directory" in _err(["fuzz", "--guided", "--frontier", str(bad)], capsys)
