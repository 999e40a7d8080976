"""The oracle near cuts and for small faults: the float64 reference and the finite
differences differentiate what autodiff differentiates, and budgets are per element."""

from __future__ import annotations

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle.check import check
from difftest.oracle.finite_diff import finite_difference
from tests.programs import backward, cut, leaf, op, program

# x -> 2x -> detach -> + x -> sum: autodiff's dL/dx is 1; the total derivative is 3
CUT_PATH = program(leaf("x", [3.0], rg=True), op("a", "mul_scalar", "x", scalar=2.0), cut("c", "detach", "a"),
                   op("z", "add", "c", "x"), op("s", "sum", "z"), backward("s"))


def test_cut_path_passes_on_the_correct_build(burn_worker: BurnWorker) -> None:
    verdict = check(CUT_PATH, burn_worker)
    assert verdict.ok, verdict.report()


@pytest.mark.parametrize("fault", ["grad-sign:add", "grad-scale:add:0.5"])
def test_a_wrong_gradient_next_to_a_cut_is_burn_wrong(fault: str) -> None:
    with BurnWorker(fault=fault) as w:
        verdict = check(CUT_PATH, w)
    assert verdict.kind == "burn-wrong", verdict.report()
    fd = verdict.findings[0].evidence["finite_difference"]
    assert fd["conclusion"] == "agrees with the float64 reference", fd


@pytest.mark.parametrize("region", ["no_grad", "inference_mode"])
def test_a_wrong_gradient_next_to_a_region_is_burn_wrong(region: str) -> None:
    p = program(leaf("x", [0.5, -1.5], rg=True), op("a", "exp", "x", region=region),
                op("z", "add", "a", "x"), op("s", "sum", "z"), backward("s"))
    with BurnWorker(fault="grad-scale:add:1e-3") as w:
        verdict = check(p, w)
    assert verdict.kind == "burn-wrong", verdict.report()


def test_finite_differences_hold_cut_values_constant(burn_worker: BurnWorker) -> None:
    """Without freezing the detached branch, the central difference measures the total
    derivative (3) and would contradict a correct autodiff gradient (1)."""
    verdict = check(CUT_PATH, burn_worker)
    frozen = finite_difference(verdict, "x", "bw", 0)
    assert frozen is not None and frozen["frozen"] == ["c"]
    assert frozen["estimates"][-1] == pytest.approx(1.0, abs=1e-6)
    total = finite_difference(verdict, "x", "bw", 0, freeze=False)
    assert total is not None and total["estimates"][-1] == pytest.approx(3.0, abs=1e-6)


def test_a_large_value_elsewhere_does_not_hide_a_small_fault() -> None:
    """A program-wide budget (scaled by the largest value anywhere) would hide this 1e-4 fault
    in tanh's gradient behind the unrelated values near 1000."""
    p = program(leaf("x", [0.5, -1.25, 2.0], rg=True), op("y", "tanh", "x"), op("s", "sum", "y"),
                leaf("big", [900.0, -950.0, 999.0], rg=True), op("e", "mul", "big", "big"),
                op("t", "sum", "e"), op("u", "add", "s", "t"), backward("u"))
    with BurnWorker(fault="grad-scale:tanh:1e-4") as w:
        verdict = check(p, w)
    assert verdict.kind == "burn-wrong", verdict.report()
    assert {m.statement for m in verdict.findings} == {"x"}


def test_every_failing_element_is_judged() -> None:
    p = program(leaf("x", [0.5, -1.25, 2.0, 0.25], rg=True), op("y", "exp", "x"), op("s", "sum", "y"),
                backward("s"))
    with BurnWorker(fault="grad-scale:exp:1e-3") as w:
        verdict = check(p, w)
    m = verdict.findings[0]
    assert m.elements == (0, 1, 2, 3)
    assert m.evidence["counts"] == {"burn-wrong": 4}, m.evidence


def test_missing_report_entries_are_findings(burn_worker: BurnWorker) -> None:
    """A value or gradient entry missing from burn's reply (with no error) is a finding."""
    from dataclasses import replace

    from difftest.ops.validate import infer_shapes
    from difftest.oracle.compare import compare
    from difftest.oracle.model import predict
    from difftest.oracle.numerics import arbitrate
    from difftest.oracle.pytorch import run as run_torch
    from difftest.program.observation import BackwardObs

    burn = burn_worker.run(CUT_PATH)
    torch_obs = run_torch(CUT_PATH)
    shapes, pred = infer_shapes(CUT_PATH), predict(CUT_PATH)
    short = replace(burn, values=burn.values[:-1])
    v = compare(CUT_PATH, shapes, pred, torch_obs, short, arbiter=arbitrate)
    assert [m.kind for m in v.findings] == ["incomplete"], v.report()
    bw = burn.backwards[0]
    fewer = replace(burn, backwards=(BackwardObs(bw.id, {k: g for k, g in bw.grads.items() if k != "a"}),))
    v = compare(CUT_PATH, shapes, pred, torch_obs, fewer, arbiter=arbitrate)
    assert [m.kind for m in v.findings] == ["incomplete"], v.report()
    v = compare(CUT_PATH, shapes, pred, torch_obs, replace(burn, backwards=()), arbiter=arbitrate)
    assert "incomplete" in [m.kind for m in v.findings], v.report()


def test_a_bug_case_fails_its_replay_when_burn_fails_differently(tmp_path: object) -> None:
    """A saved finding records the mismatches it reproduces; another failure is not it."""
    from pathlib import Path

    from difftest.findings.corpus import case_from_verdict, judge, load_case
    from difftest.findings.saving import save_case

    p = program(leaf("x", [0.5, -1.25, 2.0], rg=True), op("y", "exp", "x"), op("s", "sum", "y"), backward("s"))
    with BurnWorker(fault="grad-scale:exp:1e-3") as w:
        found = check(p, w)
    assert found.kind == "burn-wrong"
    path = save_case(case_from_verdict(found, source="test"), Path(str(tmp_path))).path
    case = load_case(path)
    assert case.record["expect"] == [{"kind": "grad", "statement": "x", "framework": None, "verdict": "burn-wrong",
                                      "elements": [0, 1, 2], "error": "small"}]
    with BurnWorker(fault="grad-scale:exp:1.2e-3") as w:  # the same elements, the same error class: as recorded
        assert judge(case, check(p, w)).ok
    with BurnWorker(fault="grad-sign:exp") as w:  # the same elements, another error class: not it
        outcome = judge(case, check(p, w))
    assert not outcome.ok and "fails differently" in outcome.message, outcome.message
    with BurnWorker(fault="lowering:exp=sin") as w:  # the forward is wrong too: a different failure
        outcome = judge(case, check(p, w))
    assert not outcome.ok and "fails differently" in outcome.message, outcome.message
    assert "observed, not recorded: value" in outcome.message
    with BurnWorker() as w:
        outcome = judge(case, check(p, w))
    assert not outcome.ok and "now passes" in outcome.message
