"""Helpers of the triage tests: a program's triage on a (faulty) worker the module keeps, and
programs saved under data/."""

from __future__ import annotations

import json
from pathlib import Path

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.triage import Triage, triage
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict

DATA = Path(__file__).parent / "data"


def triaged(workers: dict[str, BurnWorker], program: Program, fault: str | None) -> Triage:
    """The triage of `program`, which must fail, on a worker with `fault` (None: the correct
    build), started on first use and kept in `workers` (the module's fixture)."""
    key = fault or ""
    if key not in workers:
        workers[key] = BurnWorker(fault=fault)
        workers[key].start()
    w = workers[key]
    verdict = check(program, w)
    assert not verdict.ok, f"the fault {fault} does not show in this program"
    return triage(verdict, w)


def saved_program(name: str) -> Program:
    """A program saved under data/ (a generated one: a seed's programs change with the catalog)."""
    return program_from_dict(json.loads((DATA / name).read_text()))
