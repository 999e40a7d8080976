"""Wrong flags at a composite are the part's only where the part shows them too
(findings/flags_parts.py). A patched burn whose cat tracks its result by its first input alone is
one case, cat's (tests/quality/test_one_case_per_fault.py); here the guards: a composite whose own
flags are wrong (the interpreter's grad-drop of stack's result, its parts right) keeps its name,
and an op burn does not build from others is not run as parts."""

from __future__ import annotations

from typing import Any

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.flags_parts import flags_in_parts
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict


def _program(op: str) -> Program:
    statements: list[dict[str, Any]] = [
        {"id": "x0", "kind": "leaf", "shape": [2, 1], "data": [0.5, -1.0], "device": "autodiff", "require_grad": False},
        {"id": "x1", "kind": "leaf", "shape": [2, 1], "data": [1.5, 2.0], "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": op, "inputs": ["x0", "x1"], "attrs": {"dim": 1}},
        {"id": "s", "kind": "op", "op": "sum", "inputs": ["y"]},
        {"id": "bw", "kind": "backward", "input": "s"}]
    return program_from_dict({"format": "difftest-program", "version": 1, "statements": statements})


def _flags(op: str, workers: dict[str, BurnWorker]) -> None:
    fault = f"grad-drop:{op}"
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault)
        workers[fault].start()
    verdict = check(_program(op), workers[fault])
    flags = [m for m in verdict.findings if m.kind == "flags" and m.statement == "y"]
    assert flags, verdict.report()
    assert flags_in_parts(verdict, workers[fault], flags[0]) is None


def test_a_composites_own_wrong_flags_keep_its_name(workers: dict[str, BurnWorker]) -> None:
    _flags("stack", workers)  # stack is unsqueezes and a cat: the cat is right here


def test_an_op_with_no_composition_is_not_run_as_parts(workers: dict[str, BurnWorker]) -> None:
    _flags("cat", workers)
