"""Tolerance composition and the numeric verdict kinds, each reached by a hand-made program."""

from __future__ import annotations

from dataclasses import replace

import pytest

from difftest.exec.burn_worker import BurnWorker
from difftest.ops import tolerance as tol
from difftest.ops.validate import infer_shapes
from difftest.oracle.check import check
from difftest.oracle.compare import compare
from difftest.oracle.model import predict
from difftest.oracle.noise import noisy_runs
from difftest.oracle.numerics import arbitrate, judge
from difftest.oracle.pytorch import run as run_torch
from difftest.program.observation import BackwardObs, Observation, TensorObs, ValueObs
from tests.programs import backward, leaf, op, program

SMOOTH = program(leaf("x", [0.5, -1.25, 2.0], rg=True), op("y", "tanh", "x"), op("s", "sum", "y"), backward("s"))
KINK = program(leaf("x", [0.0, -1.25, 2.0], rg=True), op("y", "relu", "x"), op("s", "sum", "y"), backward("s"))


def test_budgets_are_per_element_from_measured_noise() -> None:
    """An element's budget comes from the noise of its own computation: a large value elsewhere
    in the program does not widen it (a program-wide budget would)."""
    p = program(leaf("x", [0.5, -1.25, 2.0], rg=True), op("y", "tanh", "x"), op("s", "sum", "y"),
                leaf("big", [900.0, -950.0, 999.0]), op("e", "mul_scalar", "big", scalar=1.0), backward("s"))
    ref = run_torch(p, "float64")
    noisy = noisy_runs(p)
    small = [abs(o.value("y").value.data[0] - ref.value("y").value.data[0]) for o in noisy]  # type: ignore[union-attr]
    assert 0 < max(small) < 1e-6  # a few float32 ulps of tanh(0.5), not of 999
    assert tol.budget(max(small), 0.46) < 1e-5


@pytest.mark.parametrize(
    "t,b,r,noise,kind",
    [
        (1.0, 1.0 + 1e-3, 1.0, 1e-7, "burn-wrong"),
        (1.0 + 1e-3, 1.0, 1.0, 1e-7, "torch-wrong"),
        (1.0 + 1e-3, 1.0 - 1e-3, 1.0, 1e-7, "agreement"),  # both off by as much: noisier than measured
        (1.0 + 1e-7, 1.0 - 1e-7, 1.0, 1e-7, "agreement"),
        (1.0, float("nan"), 1.0, 1e-7, "burn-wrong"),
        (float("inf"), 1.0, 1.0, 1e-7, "torch-wrong"),
        (float("inf"), float("inf"), float("inf"), 0.0, "agreement"),
        (1.0, 1.0 + 1e-4, 1.0, 0.0, "burn-wrong"),  # no measured noise: the ulp floor only
    ],
)
def test_judge(t: float, b: float, r: float, noise: float, kind: str) -> None:
    assert judge(t, b, r, noise)[0] == kind


def test_a_kink_on_the_path_is_the_only_ill_conditioned() -> None:
    assert judge(1.0, 2.0, 1.0, 0.0, "relu at statement 1 (y) has an input within 0.01 of its kink")[0] == \
        "ill-conditioned"


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
    of that size is measured (noise.py) and allowed for those elements only."""
    p = program(leaf("x", [-3.0, -2.7431578636169434, -2.297032117843628], rg=True), op("y", "sinh", "x"),
                op("s", "softmax", "y", dim=0), op("z", "expand", "s", shape=[3, 3]), backward("z"))
    verdict = check(p, burn_worker)
    burn_grad = verdict.burn.backwards[0].grads["x"]
    assert burn_grad is not None and any(abs(g) > 1e-6 for g in burn_grad.data)  # noise beyond ATOL
    assert verdict.ok, verdict.report()


def test_a_noise_run_that_raises_is_reported_not_taken_for_zero_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """If every noise run fails before the element, the judgement says so and the evidence
    names the error (an exception inside a noise run once made the noise 0, hiding the finding)."""
    import difftest.oracle.numerics as numerics
    from difftest.program.ir import Program
    from difftest.program.observation import ErrorObs

    def failing(p: Program, samples: int = 4) -> list[Observation]:
        return [Observation("torch64", error=ErrorObs("exception", "RuntimeError: boom", 0, "x"))] * samples

    monkeypatch.setattr(numerics, "noisy_runs", failing)
    with BurnWorker(fault="grad-scale:exp:1e-3") as faulty:
        verdict = check(program(leaf("x", [0.5, -1.0, 2.0], True), op("y", "exp", "x"), op("s", "sum", "y"),
                                backward("s")), faulty)
    assert not verdict.ok
    m = verdict.findings[0]
    assert "4 of 4: exception: RuntimeError: boom" in m.evidence["noise_runs_failed"], m.evidence
    assert "no noise run measured it" in m.evidence["reason"], m.evidence
