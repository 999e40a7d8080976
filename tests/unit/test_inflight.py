"""Programs in flight (difftest/exec/inflight.py): a held program is on disk once while a caller
checks it, its requests write nothing of their own, and nothing is left once it is done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.exec.inflight import in_flight, program_digest, write_program
from difftest.program.jsonio import program_from_dict, program_to_dict
from tests.programs import leaf, op, program

PROGRAM = program(leaf("x", [1.0, 2.0], rg=True), op("y", "exp", "x"))
OTHER = program(leaf("x", [3.0]))


def _worker(inflight: Path | None) -> BurnWorker:
    return BurnWorker("difftest-burn-not-started", inflight_dir=inflight)  # never started: no requests


def test_write_program_is_atomic_and_named_by_digest(tmp_path: Path) -> None:
    doc = program_to_dict(PROGRAM)
    path = write_program(tmp_path / "inflight", doc)
    assert path.name.startswith(program_digest(doc) + "-") and path.suffix == ".json"
    assert program_from_dict(json.loads(path.read_text())) == PROGRAM
    assert not list(path.parent.glob("*.tmp"))


def test_a_held_program_is_written_once_and_removed(tmp_path: Path) -> None:
    inflight = tmp_path / "inflight"
    a, b = _worker(inflight), _worker(inflight)
    with in_flight([a, b], PROGRAM):
        files = list(inflight.glob("*.json"))
        assert len(files) == 1  # one file for both workers
        assert a._write_inflight(program_to_dict(PROGRAM), PROGRAM) is None  # its requests write nothing
        own = b._write_inflight(program_to_dict(OTHER), OTHER)  # another program's request does
        assert own is not None and own.is_file()
        own.unlink()
    assert not list(inflight.glob("*.json")) and a.held is None and b.held is None


def test_a_held_program_is_removed_when_the_check_raises(tmp_path: Path) -> None:
    inflight = tmp_path / "inflight"
    w = _worker(inflight)
    with pytest.raises(RuntimeError), in_flight([w], PROGRAM):
        raise RuntimeError("a checker bug")
    assert not list(inflight.glob("*.json")) and w.held is None


def test_without_an_inflight_directory_nothing_is_written(tmp_path: Path) -> None:
    w = _worker(None)
    with in_flight([w], PROGRAM):
        assert w.held is None and w._write_inflight(program_to_dict(PROGRAM), PROGRAM) is None
    assert not list(tmp_path.iterdir())
