"""A backward that is wrong only beside constant inputs is named by its op (difftest/findings/
localise.py): the one-op experiments make every input a tracked leaf, where such a fault does
not show, so each op with untracked inputs in the program is tried again with them untracked.

The fault is burn's `cat` backward slicing the output gradient by the tracked inputs' sizes
alone (an input after a constant one gets the wrong slice): a patched burn campaign saved it as
two cases named after the ops that read the result (`graph@sinh`, `graph@var_bias`) before this
experiment. Here the interpreter's `grad-scale-beside-constant` fault stands in for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.localise import localise
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.program.ir import Leaf, Program
from tests.programs import backward, leaf, op, program

FAULT = "grad-scale-beside-constant:cat:0.25"


def _cat_then_sinh() -> Program:
    """cat(x0, c, x4) with c a constant, read by sinh (its cotangent is not uniform)."""
    return program(leaf("x0", [0.5, 0.5, 0.5], True), leaf("c", [0.5]), leaf("x4", [1.0, 1.0, 1.0], True),
                   op("v", "cat", "x0", "c", "x4", dim=0), op("s", "sinh", "v"), backward("s"))


@pytest.fixture(scope="module")
def faulty() -> Iterator[BurnWorker]:
    w = BurnWorker(fault=FAULT)
    w.start()
    yield w
    w.close()


def test_the_fault_shows_only_beside_a_constant(burn_worker: BurnWorker, faulty: BurnWorker) -> None:
    p = _cat_then_sinh()
    assert check(p, burn_worker).ok
    assert not check(p, faulty).ok
    tracked = program(*(leaf(s.id, list(s.data), True) if s.kind == "leaf" else s for s in p.statements))
    assert check(tracked, faulty).ok, "with every input tracked the fault must not show"


def test_it_is_named_by_the_op(faulty: BurnWorker) -> None:
    verdict = check(_cat_then_sinh(), faulty)
    loc = localise(verdict, faulty)
    assert loc is not None and (loc.where, loc.confidence, loc.kind) == ("cat", "fails", "grad"), loc
    assert loc.program is not None
    constants = [s for s in loc.program.statements if isinstance(s, Leaf) and not s.require_grad and s.id != "ct"]
    assert [s.data for s in constants] == [(0.5,)], "the reproducer keeps the constant input"
    assert triage(verdict, faulty).signature.startswith("burn-wrong:-:cat:grad")
