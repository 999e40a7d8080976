"""Ties the program's dtype makes and float64 does not (difftest/oracle/kink_inputs.py): erf
saturates to 1.0 in bfloat16 long before float64, so `max` of such values has a tie in both
frameworks' own inputs, and each splits the gradient by its own convention there (PyTorch
evenly, burn all to the first). The float64 reference has no tie: judged against it alone,
PyTorch's share looked wrong (a `torch-wrong` finding on the correct build, seed 5, program
1922 of a 3,000-program campaign). Each result is now judged against the float64 run from its
own framework's inputs, burn's with burn's convention, within the noise measured there."""

from __future__ import annotations

import torch

from difftest.exec.burn_worker import BurnWorker
from difftest.oracle import kink_inputs as ki
from difftest.oracle.check import check
from difftest.program.ir import Program
from tests.programs import backward, leaf, op, program

X = [-1.2443617582321167, -1.6854058504104614, 1.1231447458267212, -0.9671456813812256, -1.0026419162750244,
     -1.7463455200195312, -2.7918810844421387, -0.09086597710847855, 1.4763593673706055, -1.3167684078216553,
     2.462104558944702, -2.561622142791748, 0.5938530564308167, -1.9964932203292847, 2.2964658737182617,
     -0.3361177444458008]


def _saturated_max() -> Program:
    return program(leaf("x0", X, rg=True, shape=[4, 1, 4]), op("v0", "cast", "x0", dtype="bfloat16"),
                   op("v1", "mul_scalar", "v0", scalar=-2.2357935905456543), op("v4", "erf", "v1"),
                   op("v6", "max", "v4"), backward("v6"))


def test_a_tie_the_programs_dtype_makes_is_judged_by_each_frameworks_convention_there(
        burn_worker: BurnWorker) -> None:
    verdict = check(_saturated_max(), burn_worker)
    assert verdict.ok, verdict.report()
    reasons = " ".join(d.detail for d in verdict.dismissals if d.verdict == "ill-conditioned")
    assert "torch's own input lies at or across its kink" in reasons
    assert "burn's own input lies at or across its kink" in reasons


def test_burns_own_run_takes_burns_convention_at_the_tie() -> None:
    p = program(leaf("x", [1.0, 3.0, 3.0], rg=True), op("m", "max", "x"), backward("m"))
    sites = {"m": [torch.tensor([1.0, 3.0, 3.0], dtype=torch.float64)]}
    for burn, want in ((False, (0.0, 0.5, 0.5)), (True, (0.0, 1.0, 0.0))):
        obs = ki.from_own_inputs(p, sites, burn=burn)
        assert obs is not None
        g = obs.backwards[0].grads["x"]
        assert g is not None and g.data == want, (burn, g)
    # with noise, the ties of the own inputs are kept: the split stays a split, near the halves
    noisy = ki.from_own_inputs(p, sites, seed=3)
    assert noisy is not None
    g = noisy.backwards[0].grads["x"]
    assert g is not None and g.data[0] == 0.0 and all(abs(x - 0.5) < 1e-6 for x in g.data[1:]), g


def test_a_result_must_be_near_its_own_frameworks_value_within_the_noise_measured_there() -> None:
    """What makes a wrong result through such a tie a finding still: each result must be the
    reference or its own framework's value, within the noise measured around that value."""
    own = {"torch": ki.Own(-2e-4, 3e-5), "burn": ki.Own(-1.1e-3, 1e-4)}
    assert ki.explained(-1.9e-4, -1.08e-3, 0.0, own, 0.0, 0.0, "bfloat16")
    assert not ki.explained(-1.9e-4, -3e-3, 0.0, own, 0.0, 0.0, "bfloat16")  # burn is neither
    assert not ki.explained(-6e-4, 0.0, 0.0, own, 0.0, 0.0, "bfloat16")  # torch is neither
    # the budget is the noise measured around each own value (8x, ops/tolerance.py NOISE_FACTOR)
    assert ki.explained(-4e-4, -1.1e-3, 0.0, own, 0.0, 0.0, "bfloat16")


def test_a_value_computed_from_a_gradient_at_a_tie_of_two_leaves_is_ill_conditioned(
        burn_worker: BurnWorker) -> None:
    """minimum(x, y) with x[0] == y[0]: y's gradient there is PyTorch's 0.5 or burn's 0 or 1 (each
    a subgradient), and so is any value computed from it (exp of the read). Moving every leaf
    alike keeps the tie, so the value looked smooth there and burn's result wrong (a float64
    campaign, seed 9); the leaves are also moved apart, and the value's one-sided limits show."""
    from difftest.program.ir import Grad

    p = program(leaf("x", [0.5, 1.0], rg=True), leaf("y", [0.5, 2.0], rg=True), op("v", "minimum", "x", "y"),
                op("s", "sum", "v"), backward("s"), Grad("g", "bw", "y"), op("e", "exp", "g"))
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert any(d.statement == "e" and d.verdict == "ill-conditioned" for d in verdict.dismissals), verdict.report()
