"""A kink where both frameworks declare the same subgradient (oracle/agreed_points.py): with the
input exactly at it in every run, the float64 reference is the answer, and a burn whose
convention changed there is a finding, though its result still lies between the one-sided limits
the kink check accepts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.agreed_points import AGREED, agreed_point
from difftest.oracle.check import check
from difftest.oracle.compare import Verdict
from difftest.program.ir import Backward, Leaf, OpCall, Program
from difftest.program.observation import Observation


def _program(op: str) -> Program:
    return Program((Leaf("x", (4,), (0.0, 1.5, -2.0, 0.75), "autodiff", True), OpCall("y", op, ("x",)),
                    OpCall("m", "mul_scalar", ("y",), {"scalar": 3.0}), OpCall("s", "sum", ("m",)),
                    Backward("bw", "s")))


def test_both_agreed_conventions_are_declared_alike() -> None:
    assert set(AGREED) == {"abs", "relu", "elu"}


@pytest.mark.parametrize(("op", "g"), [("abs", 1.0), ("relu", 0.5)])
def test_a_changed_convention_at_an_agreed_kink_is_a_finding(op: str, g: float) -> None:
    with BurnWorker() as worker:
        assert check(_program(op), worker).ok  # the correct build: both give the declared 0
    with BurnWorker(fault=f"kink-grad:{op}:{g}") as worker:
        verdict = check(_program(op), worker)
    (m,) = verdict.findings
    assert (m.kind, m.statement, m.verdict) == ("grad", "x", "burn-wrong"), verdict.report()
    assert f"{op}-at-zero" in m.detail or any(f"{op}-at-zero" in str(v) for v in m.evidence.values()), m
    assert agreed_point(verdict, m) is not None


def _moved(obs: Observation, ident: str, element: int, to: float) -> Observation:
    values = tuple(
        replace(v, value=replace(v.value, data=tuple(to if i == element else x for i, x in enumerate(v.value.data))))
        if v.id == ident and v.value is not None else v for v in obs.values)
    return replace(obs, values=values)


def test_an_input_not_exactly_at_the_point_in_one_run_leaves_the_kink_check_to_decide() -> None:
    """burn's float32 input next to the point while float64's is at it (a rounding apart): no
    convention then fixes burn's subgradient, and the hull of the one-sided limits decides."""
    with BurnWorker(fault="kink-grad:abs:1") as worker:
        verdict = check(_program("abs"), worker)
    (m,) = verdict.findings
    burn_off = Verdict(verdict.program, verdict.prediction, verdict.torch, _moved(verdict.burn, "x", 0, 1e-30),
                       verdict.mismatches, verdict.reference)
    assert agreed_point(burn_off, m) is None
    torch_off = replace(burn_off, burn=verdict.burn, torch=_moved(verdict.torch, "x", 0, -1e-30))
    assert agreed_point(torch_off, m) is None
    # a kink near but not at the point elsewhere in the same input
    near = Program((Leaf("x", (4,), (0.0, 1e-4, -2.0, 0.75), "autodiff", True), *_program("abs").statements[1:]))
    with BurnWorker(fault="kink-grad:abs:1") as worker:
        near_verdict = check(near, worker)
    for f in near_verdict.mismatches:
        if f.kind == "grad":
            assert agreed_point(near_verdict, f) is None


def test_a_kink_whose_conventions_differ_is_still_the_kink_checks() -> None:
    """leaky_relu at 0: PyTorch takes the negative slope, burn the positive (a declared
    divergence); no single answer, so no agreed point, and the program passes."""
    program = Program((Leaf("x", (3,), (0.0, 1.5, -2.0), "autodiff", True),
                       OpCall("y", "leaky_relu", ("x",), {"slope": 0.125}), OpCall("s", "sum", ("y",)),
                       Backward("bw", "s")))
    with BurnWorker() as worker:
        verdict = check(program, worker)
    assert verdict.ok, verdict.report()
    assert all(agreed_point(verdict, m) is None for m in verdict.mismatches)
