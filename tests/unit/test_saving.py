"""Saving a case (findings/saving.py): a file already under the case's name that is not a
readable case of the same program is moved aside, not taken for the case; and what difftest
writes for the user gets the permissions the user's umask gives a new file."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from difftest.findings.corpus import Case, iter_case_files, load_case, program_hash
from difftest.findings.saving import save_case
from difftest.findings.summary import Summary, write_json
from difftest.program.files import write_atomic
from difftest.program.ir import Program
from tests.programs import backward, leaf, op, program

PROG = program(leaf("x", [1.0, 2.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"))
OTHER = program(leaf("x", [1.0, 3.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"))


def _case(prog: Program = PROG, reason: str = "r") -> Case:
    return Case(prog, "pass", reason)


def test_a_truncated_case_under_the_name_is_moved_aside_and_the_finding_saved(tmp_path: Path) -> None:
    """It was kept as 'already saved': the finding it stood for could never be saved again."""
    first = save_case(_case(reason="first"), tmp_path)
    whole = first.path.read_bytes()
    first.path.write_bytes(whole[:200])
    saved = save_case(_case(reason="second"), tmp_path)
    assert saved.created and saved.path == first.path
    assert load_case(saved.path).reason == "second"
    aside = tmp_path / f"{program_hash(PROG)}.json.corrupt"
    assert saved.moved_aside == aside and aside.read_bytes() == whole[:200]  # nothing lost
    assert saved.warning is not None and str(saved.path) in saved.warning and str(aside) in saved.warning
    assert "malformed JSON" in saved.warning
    assert iter_case_files([tmp_path]) == [saved.path]  # the one set aside is not collected as a case


def test_every_file_moved_aside_keeps_its_own_name(tmp_path: Path) -> None:
    path = save_case(_case(), tmp_path).path
    for text in ("{", "[]"):
        path.write_text(text)
        save_case(_case(), tmp_path)
    assert (tmp_path / f"{path.name}.corrupt").read_text() == "{"
    assert (tmp_path / f"{path.name}.corrupt-2").read_text() == "[]"


def test_a_case_of_another_program_under_the_name_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / f"{program_hash(PROG)}.json"
    other = save_case(_case(OTHER), tmp_path).path
    os.rename(other, path)
    saved = save_case(_case(), tmp_path)
    assert saved.created and program_hash(load_case(path).program) == program_hash(PROG)
    assert saved.moved_aside is not None and program_hash(load_case(saved.moved_aside).program) == program_hash(OTHER)
    assert saved.warning is not None and "another program" in saved.warning


def test_a_readable_case_of_the_same_program_is_kept(tmp_path: Path) -> None:
    first = save_case(_case(reason="first"), tmp_path)
    again = save_case(_case(reason="second"), tmp_path)
    assert first.created and not again.created and again.warning is None
    assert load_case(again.path).reason == "first" and [p.name for p in tmp_path.iterdir()] == [first.path.name]


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_saved_case_gets_the_mode_of_the_umask(tmp_path: Path, umask_022: None) -> None:
    """Saved cases and flaky observations (both save_case) were 0600, mkstemp's mode."""
    assert _mode(save_case(_case(), tmp_path).path) == 0o644
    os.umask(0o027)
    assert _mode(save_case(_case(OTHER), tmp_path / "flaky").path) == 0o640


def test_files_written_whole_get_the_mode_of_the_umask(tmp_path: Path, umask_022: None) -> None:
    summary = tmp_path / "summary.json"
    write_json(Summary(programs=1, seconds=1.0), summary)
    assert _mode(summary) == 0o644 and json.loads(summary.read_text())["programs"] == 1
    fresh = tmp_path / "fresh.txt"
    assert write_atomic(fresh, "a") and _mode(fresh) == 0o644
    fresh.chmod(0o600)  # a file the user restricted stays restricted when rewritten
    assert write_atomic(fresh, "b") and _mode(fresh) == 0o600 and fresh.read_text() == "b"
    assert not write_atomic(fresh, "c", replace=False) and fresh.read_text() == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.txt", "summary.json"]  # no temporary left
