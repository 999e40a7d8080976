"""The localiser's own harness (difftest/findings/one_op.py): a seeded one-op program applies the
cotangent with a `mul`, since burn seeds a backward with ones only. With that mul wrong, every
seeded experiment fails whatever op it holds; the localiser checks the harness on a bare leaf
before it names the op, and names the mul when the harness alone fails.

Before that check, a 1,000-program campaign (seed 0, float64 known-bug sites kept at half their
triggers) against `grad-scale:mul:1e-3` saved four cases, mul and three named after atan2, sub
and matmul: programs without a single mul, whose only error is a known bug, localised through
seeded experiments that failed by the harness alone. They are kept whole in data/harness_mul/,
named by the known bug each shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.localise import localise
from difftest.findings.one_op import HARNESS_OP, harness_program, one_op_program
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.program.ir import Leaf, OpCall, Program
from difftest.program.jsonio import program_from_dict
from tests.programs import backward, leaf, op

FAULT = f"grad-scale:{HARNESS_OP}:1e-3"
PROGRAMS = sorted((Path(__file__).parent / "data" / "harness_mul").glob("*.json"))


def _worker(workers: dict[str, BurnWorker], fault: str) -> BurnWorker:
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault or None)
        workers[fault].start()
    return workers[fault]


def _seeded_exp(w: BurnWorker) -> Program:
    p = Program((leaf("x", [0.5, -1.0, 2.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s")))
    v = check(p, w)
    built = one_op_program(p, p.by_id()["y"], v.torch, v.burn, seeded=True, grads=True)
    assert built is not None
    return built[0]


def test_the_harness_is_the_cotangent_on_a_bare_leaf(workers: dict[str, BurnWorker]) -> None:
    seeded = _seeded_exp(_worker(workers, ""))
    control = harness_program(seeded)
    assert control is not None
    statements = control.statements
    assert [s.kind for s in statements] == ["leaf", "leaf", "op", "backward"]
    ct = seeded.by_id()["ct"]
    assert isinstance(ct, Leaf) and statements[1] == ct
    assert isinstance(statements[2], OpCall) and statements[2].op == HARNESS_OP
    # right on the correct build, wrong where the harness's op is
    assert check(control, _worker(workers, "")).ok
    assert not check(control, _worker(workers, FAULT)).ok
    # an unseeded one-op program has no harness
    unseeded = Program(tuple(s for s in seeded.statements if s.id not in ("ct", "z"))[:-1] + (backward("y"),))
    assert harness_program(unseeded) is None


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_a_known_bug_seen_through_a_wrong_harness_is_that_known_bug(workers: dict[str, BurnWorker],
                                                                     path: Path) -> None:
    program = program_from_dict(json.loads(path.read_text()))
    assert not any(isinstance(s, OpCall) and s.op == HARNESS_OP for s in program.statements)
    for fault in ("", FAULT):
        w = _worker(workers, fault)
        verdict = check(program, w)
        assert not verdict.ok, "the known bug does not show in this program"
        t = triage(verdict, w)
        assert t.known is not None and t.known.name == path.stem.rsplit("-", 1)[0], (fault, t.describe())


def test_a_seeded_experiment_failing_by_its_harness_names_the_harness(workers: dict[str, BurnWorker]) -> None:
    """x5's gradient in this program goes through atan2 alone, and is wrong because atan2's other
    input is (a float64 hard_sigmoid computed in f32): no op on its path fails with ones, and
    every seeded experiment fails with the mul wrong. The mul is named, not atan2, at no
    statement of the program (it holds no mul)."""
    path = next(p for p in PROGRAMS if p.stem.endswith("abe84282"))
    program = program_from_dict(json.loads(path.read_text()))
    w = _worker(workers, FAULT)
    verdict = check(program, w)
    m = next(f for f in verdict.findings if f.kind == "grad" and f.statement == "x5")
    loc = localise(verdict, w, m, same_kind=True)
    assert loc is not None and loc.where == HARNESS_OP and loc.statement is None, loc
    assert loc.program is not None and [s.kind for s in loc.program.statements] == ["leaf", "leaf", "op", "backward"]
    assert loc.confidence == "fails" and loc.input == (0,)
    # on the correct build the same finding is not the harness's
    ok = _worker(workers, "")
    right = check(program, ok)
    m = next(f for f in right.findings if f.kind == "grad" and f.statement == "x5")
    loc = localise(right, ok, m, same_kind=True)
    assert loc is None or loc.where != HARNESS_OP, loc
