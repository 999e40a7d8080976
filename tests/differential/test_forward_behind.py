"""A float64 error of rounding's size that scaled inputs show larger is a wrong number, and a
composite's wrong gradient is its forward's where the float64 forward is wrong
(findings/forward_behind.py). A patched burn whose layer_norm adds epsilon after the square root
made three cases (the float32 forward, a float32 gradient whose forward stayed in its budget, a
float64 forward off by 1e-6); tests/quality/test_one_case_per_fault.py asks it for one."""

from __future__ import annotations

from typing import Any

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.error_classes import WRONG_NUMBER
from difftest.findings.forward_behind import forward_behind, sized
from difftest.findings.localisation import Localisation
from difftest.findings.localise import judge
from difftest.findings.triage import triage
from difftest.oracle.check import check
from difftest.program.ir import Program
from difftest.program.jsonio import program_from_dict

DATA = [0.93, 1.27, -1.08, 1.41, -0.87, 1.15]


def _worker(workers: dict[str, BurnWorker], fault: str) -> BurnWorker:
    if fault not in workers:
        workers[fault] = BurnWorker(fault=fault or None)
        workers[fault].start()
    return workers[fault]


def _one_op(op: str, dtype: str) -> Program:
    statements: list[dict[str, Any]] = [
        {"id": "a0", "kind": "leaf", "shape": [len(DATA)], "data": DATA, "device": "autodiff", "require_grad": True},
        {"id": "y", "kind": "op", "op": op, "inputs": ["a0"]},
        {"id": "bw", "kind": "backward", "input": "y"}]
    return program_from_dict({"format": "difftest-program", "version": 1, "dtype": dtype, "statements": statements})


@pytest.mark.parametrize(("fault", "signature"), [
    # an absolute 1e-7 on sin near 1 is a relative 1e-7, rounding's size; on inputs scaled by
    # 2^-12 it is 4e-4 of the result: a wrong number, the op's forward
    ("value-shift:sin:1e-7", "burn-wrong:-:sin:forward"),
    # a relative error stays that size on any input: a float64 precision loss keeps its class
    ("value-scale:sin:2e-7", "burn-wrong:-:sin:value:rounding"),
])
def test_a_float64_error_of_roundings_size_is_judged_on_scaled_inputs(
        workers: dict[str, BurnWorker], fault: str, signature: str) -> None:
    program = _one_op("sin", "float64")
    assert check(program, _worker(workers, "")).ok
    worker = _worker(workers, fault)
    verdict = check(program, worker)
    assert not verdict.ok
    assert triage(verdict, worker).signature.split(" #")[0] == signature


def _grad_localisation(op: str, worker: BurnWorker) -> Localisation:
    """The float32 one-op program of `op` as a failing gradient's localisation (the campaign's,
    when the forward stays within its float32 budget)."""
    p = _one_op(op, "float32")
    v = judge(p, worker)
    assert v is not None
    return Localisation("y", op, "grad", (0,), "float32", "small", "burn-wrong", {}, p, v, None, "fails")


@pytest.mark.parametrize(("op", "fault", "forward"), [
    ("silu", "value-scale:silu:1e-4", True),  # a composite whose forward is wrong: its gradient is that
    ("silu", "grad-scale:silu:1e-3", False),  # its forward right in float64: the gradient's own
    ("exp", "value-scale:exp:1e-4", False),  # an op with a backward of its own: two findings may be two bugs
])
def test_a_composites_gradient_is_its_forwards_where_the_float64_forward_is_wrong(
        workers: dict[str, BurnWorker], op: str, fault: str, forward: bool) -> None:
    worker = _worker(workers, fault)
    found = _grad_localisation(op, worker)
    moved = forward_behind(found, lambda q: judge(q, worker))
    if forward:
        assert (moved.kind, moved.dtype, moved.input) == ("value", "float64", None)
        assert moved.error in WRONG_NUMBER and moved.program is not None and moved.program.dtype == "float64"
    else:
        assert moved is found


def test_sized_leaves_other_findings_alone(workers: dict[str, BurnWorker]) -> None:
    worker = _worker(workers, "value-shift:sin:1e-7")
    found = _grad_localisation("sin", worker)  # float32: rounding is no precision loss there
    assert sized(found, lambda q: judge(q, worker)) is found
