"""Tolerance composition and the numeric verdict kinds, each reached by a hand-made program."""

from __future__ import annotations

from dataclasses import replace

import pytest

from difftest import tolerance as tol
from difftest.burn_worker import BurnWorker
from difftest.compare import compare, value_budgets
from difftest.model import predict
from difftest.numerics import arbitrate, classify
from difftest.observation import BackwardObs, Observation, TensorObs, ValueObs
from difftest.runner import check
from difftest.torch_exec import run_torch
from difftest.validate import infer_shapes
from tests.programs import backward, leaf, op, program

SMOOTH = program(leaf("x", [0.5, -1.25, 2.0], rg=True), op("y", "tanh", "x"), op("s", "sum", "y"), backward("s"))
KINK = program(leaf("x", [0.0, -1.25, 2.0], rg=True), op("y", "relu", "x"), op("s", "sum", "y"), backward("s"))


def test_budget_composes_along_the_path() -> None:
    p = program(leaf("x", [1.0] * 8, shape=[8]), op("a", "exp", "x"), op("b", "neg", "a"),
                op("c", "sum", "b"), op("d", "tanh", "c"))
    b = value_budgets(p, infer_shapes(p))
    t, acc = tol.TRANSCENDENTAL, tol.ACCUMULATE
    assert b["x"] == 0.0
    assert b["a"] == pytest.approx(t.rel)
    assert b["b"] == pytest.approx(b["a"])  # exact ops add nothing
    assert b["c"] == pytest.approx(acc.rel * 8**0.5 + acc.amp * b["b"])  # grows with the reduced extent
    assert b["d"] == pytest.approx(t.rel + t.amp * b["c"])
    assert tol.grad_budget(list(b.values())) > tol.allowed(b["d"])


@pytest.mark.parametrize(
    "t,b,r,kind",
    [
        (1.0, 1.0 + 1e-3, 1.0, "burn-wrong"),
        (1.0 + 1e-3, 1.0, 1.0, "torch-wrong"),
        (1.0 + 1e-3, 1.0 - 1e-3, 1.0, "ill-conditioned"),  # both far: the input is ill-conditioned
        (1.0 + 1e-7, 1.0 - 1e-7, 1.0, "agreement"),
        (1.0, float("nan"), 1.0, "burn-wrong"),
    ],
)
def test_classify(t: float, b: float, r: float, kind: str) -> None:
    assert classify(t, b, r, 1e-6) == kind


def _tampered(obs: Observation, factor: float) -> Observation:
    bw = obs.backwards[0]
    g = bw.grads["x"]
    assert g is not None
    grads = dict(bw.grads)
    grads["x"] = TensorObs(g.shape, tuple(v * factor for v in g.data))
    return replace(obs, backwards=(BackwardObs(bw.id, grads),))


def _verdict(p: object, torch_obs: Observation, burn_obs: Observation) -> str:
    v = compare(p, infer_shapes(p), predict(p), torch_obs, burn_obs, arbiter=arbitrate)  # type: ignore[arg-type]
    return v.mismatches[0].verdict if v.mismatches else "pass"


def test_burn_wrong_from_an_injected_fault() -> None:
    with BurnWorker(fault="grad-scale:tanh:1e-2") as w:
        verdict = check(SMOOTH, w)
    assert verdict.kind == "burn-wrong"
    ev = verdict.findings[0].evidence
    assert ev["burn_error"] > ev["torch_error"] and "finite_difference" in ev


def test_torch_wrong_when_pytorch_is_the_outlier(burn_worker: BurnWorker) -> None:
    burn_obs = burn_worker.run(SMOOTH)
    assert _verdict(SMOOTH, _tampered(run_torch(SMOOTH), 1.01), burn_obs) == "torch-wrong"


def test_kink_is_ill_conditioned_not_a_finding(burn_worker: BurnWorker) -> None:
    """At relu's kink the one-sided slopes differ, so a gradient disagreement is no finding."""
    burn_obs = _tampered(burn_worker.run(KINK), 1.0)
    torch_obs = run_torch(KINK)
    bw = burn_obs.backwards[0]
    g = bw.grads["x"]
    assert g is not None
    grads = {**bw.grads, "x": TensorObs(g.shape, (1.0, *g.data[1:]))}  # the other subgradient at 0
    burn_obs = replace(burn_obs, backwards=(BackwardObs(bw.id, grads),))
    assert _verdict(KINK, torch_obs, burn_obs) == "ill-conditioned"


def test_float32_noise_is_agreement(burn_worker: BurnWorker) -> None:
    burn_obs = burn_worker.run(SMOOTH)
    vals = tuple(ValueObs(v.id, TensorObs(v.value.shape, tuple(x * (1 + 3e-7) for x in v.value.data)), v.flags)
                 if v.id == "y" else v for v in burn_obs.values)
    assert _verdict(SMOOTH, run_torch(SMOOTH), replace(burn_obs, values=vals)) in ("pass", "agreement")


def test_gradient_cancellation_is_not_a_finding(burn_worker: BurnWorker) -> None:
    """sum(softmax(.)) has an exactly-zero gradient made of terms of size ~10: float32 noise
    of that size is allowed (tolerance.cancellation_floor), a 1e-3 relative fault is not."""
    p = program(leaf("x", [-3.0, -2.7431578636169434, -2.297032117843628], rg=True), op("y", "sinh", "x"),
                op("s", "softmax", "y", dim=0), op("z", "expand", "s", shape=[3, 3]), backward("z"))
    verdict = check(p, burn_worker)
    burn_grad = verdict.burn.backwards[0].grads["x"]
    assert burn_grad is not None and any(abs(g) > 1e-6 for g in burn_grad.data)  # noise beyond ATOL
    assert verdict.ok, verdict.report()
    assert tol.cancellation_floor(10.0) < 1e-4 < 1e-3
