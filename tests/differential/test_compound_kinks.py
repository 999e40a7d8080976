"""Compound non-differentiability (difftest/oracle/burn_conventions.py, kinks.py `_burn_composed`):
a tie routing the gradient into a kink, where each framework's per-op conventions compose to a
result outside the hull of the program's one-sided limits."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from difftest.divergences.conventions import CONVENTIONS, Convention
from difftest.exec.burn_worker import BurnWorker
from difftest.ops.catalog import CATALOG
from difftest.ops.validate import infer_shapes
from difftest.oracle.burn_conventions import SIDES, burn_convention_gradient
from difftest.oracle.check import check
from difftest.oracle.compare import compare
from difftest.oracle.model import predict
from difftest.oracle.numerics import arbitrate
from difftest.program.observation import BackwardObs, Observation, TensorObs
from tests.programs import backward, cut, leaf, op, program

# prelu(x, 0.25) at x = [[0, 0]] then gather_argmin over the row: the tie sends the gradient to
# x[0], through prelu at 0 (PyTorch 0.25, burn 1: the convention prelu-at-zero). Moving x[0] up
# moves the argmin to x[1] (slope 0), down keeps it (slope 0.25): one-sided limits 0 .. 0.25, and
# burn's 1 is its conventions composed (argmin's first index, prelu'(0) = 1), outside them.
TIE_INTO_KINK = program(leaf("x", [0.0, 0.0], rg=True, shape=[1, 2]), leaf("w", [0.25], rg=True),
                        op("y", "prelu", "x", "w"), op("m", "gather_argmin", "y", dim=1), backward("m"))

DIFFERING = [c for c in CONVENTIONS if c.torch_grads != c.burn_grads]


def _with_grad(obs: Observation, leaf_id: str, element: int, value: float) -> Observation:
    bw = obs.backwards[0]
    g = bw.grads[leaf_id]
    assert g is not None
    data = list(g.data)
    data[element] = value
    return replace(obs, backwards=(BackwardObs(bw.id, {**bw.grads, leaf_id: TensorObs(g.shape, tuple(data))}),))


def _verdicts(p: object, torch_obs: Observation, burn_obs: Observation) -> dict[str, str]:
    v = compare(p, infer_shapes(p), predict(p), torch_obs, burn_obs, arbiter=arbitrate)  # type: ignore[arg-type]
    return {m.statement or "": m.verdict for m in v.mismatches}


@pytest.mark.parametrize("c", DIFFERING, ids=[c.name for c in DIFFERING])
def test_each_side_gives_the_declared_burn_gradients(c: Convention) -> None:
    """A side is burn's convention: PyTorch's backward at the moved inputs is burn's declared
    gradient at the point, and the op is at its point there."""
    xs = [torch.tensor(d, dtype=torch.float64).reshape(c.shape(i)) for i, d in enumerate(c.inputs)]
    side = SIDES[c.op]
    assert side.at_point(xs, c.attrs, c.tracks)
    moved = [x.requires_grad_(on) for x, on in zip(side.move(xs, c.attrs, c.tracks), c.tracks)]
    grads = torch.autograd.grad(CATALOG[c.op].lower(moved, c.attrs).sum(), [x for x in moved if x.requires_grad])
    got = [float(v) for g in grads for v in g.reshape(-1)]
    assert got == pytest.approx([v for g in c.burn_grads for v in g]), f"{c.name}: {got} is not burn's {c.burn_grads}"


def test_burn_s_composed_conventions_at_a_tie_into_a_kink_are_ill_conditioned(burn_worker: BurnWorker) -> None:
    """burn's 1 lies outside the one-sided limits (0 .. 0.25) but is the float64 reference with
    burn's convention at prelu: ill-conditioned (a burn-wrong without the rule). The same program
    found by the quality suite's no-false-alarm campaign is corpus/findings/cf48711a3888b61e.json."""
    alt = burn_convention_gradient(TIE_INTO_KINK, "x", "bw", 0)
    assert alt == (1.0, {"y": "prelu-at-zero"})
    verdict = check(TIE_INTO_KINK, burn_worker)
    assert verdict.ok, verdict.report()
    assert verdict.burn.backwards[0].grads["x"].data[0] == 1.0  # type: ignore[union-attr]
    assert {m.statement: m.verdict for m in verdict.mismatches}.get("x") == "ill-conditioned", verdict.report()


@pytest.mark.parametrize("value", [0.5, -1.0, 2.0])
def test_a_gradient_at_the_kink_matching_neither_convention_is_a_finding(burn_worker: BurnWorker,
                                                                          value: float) -> None:
    """0.5 is neither PyTorch's composition (0.25) nor burn's (1), and outside the limits 0 .. 0.25."""
    verdict = check(TIE_INTO_KINK, burn_worker)
    burn_obs = _with_grad(verdict.burn, "x", 0, value)
    assert _verdicts(TIE_INTO_KINK, verdict.torch, burn_obs)["x"] == "burn-wrong"


def test_a_wrong_prelu_gradient_away_from_the_kink_is_a_finding(burn_worker: BurnWorker) -> None:
    """x = [[-0.5, 0]]: prelu is at its convention point at x[1], but x[0]'s gradient (0.25, the
    argmin's) goes through prelu at -0.5: burn's convention composed is 0.25 there too, and 1 is
    a finding."""
    p = program(leaf("x", [-0.5, 0.0], rg=True, shape=[1, 2]), leaf("w", [0.25], rg=True),
                op("y", "prelu", "x", "w"), op("m", "gather_argmin", "y", dim=1), backward("m"))
    assert burn_convention_gradient(p, "x", "bw", 0) == (0.25, {"y": "prelu-at-zero"})
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert _verdicts(p, verdict.torch, _with_grad(verdict.burn, "x", 0, 1.0))["x"] == "burn-wrong"


# clamp_max(x, 1) with x = [1, 1.5]: both clamp to 1, so min(-clamp) ties. Moving x[0] either way
# leaves its gradient 0 (up: clamped; down: the min moves to x[1]): the one-sided differences
# agree (0), and so does PyTorch. burn's -1 is its conventions composed (min's first element of the
# tie, clamp passing the gradient at its bound): no finding; -0.5 is neither, and stays one.
TIE_AFTER_BOUND = program(leaf("x", [1.0, 1.5], rg=True), op("c", "clamp_max", "x", max=1.0), op("n", "neg", "c"),
                          op("m", "min", "n"), backward("m"))


def test_composed_conventions_where_the_one_sided_differences_agree(burn_worker: BurnWorker) -> None:
    verdict = check(TIE_AFTER_BOUND, burn_worker)
    assert verdict.ok, verdict.report()
    assert verdict.burn.backwards[0].grads["x"].data[0] == -1.0  # type: ignore[union-attr]
    assert {m.statement: m.verdict for m in verdict.mismatches}.get("x") == "ill-conditioned", verdict.report()
    assert _verdicts(TIE_AFTER_BOUND, verdict.torch, _with_grad(verdict.burn, "x", 0, -0.5))["x"] == "burn-wrong"


def test_a_quotient_within_its_own_rounding_of_an_integer_is_remainders_kink(burn_worker: BurnWorker) -> None:
    """burn rounds remainder's quotient in the op's dtype before floor, PyTorch's half-precision
    kernels compute it in float32: in bfloat16, 9.971 rounds to 10.0, so burn's y-gradient there
    is -10 and PyTorch's -9. The quotient keeps the kink gap in float64 (0.029 from 10), but not
    its own rounding in bfloat16 (0.078 at 10): the element is at the kink. A bfloat16 campaign
    (seed 21, every known bug's trigger kept) saved the program in data/ as burn's fault."""
    import json
    from pathlib import Path

    from difftest.ops.domains import DTYPE_ATTR
    from difftest.program.jsonio import program_from_dict

    ok = CATALOG["remainder"].domain.predicate
    q = [torch.tensor([9.971 * 0.80859375], dtype=torch.float64), torch.tensor([0.80859375], dtype=torch.float64)]
    assert ok(q, {}) and ok(q, {DTYPE_ATTR: "float32"})
    assert not ok(q, {DTYPE_ATTR: "bfloat16"})
    path = Path(__file__).parent / "data" / "remainder-bf16-quotient-rounded.json"
    verdict = check(program_from_dict(json.loads(path.read_text())), burn_worker)
    assert verdict.ok, verdict.report()


def test_a_kink_only_the_dtype_rounding_makes_is_judged_by_limits_across_the_rounding(
        burn_worker: BurnWorker) -> None:
    """remainder(cosh(x0), x1) in bfloat16 with a quotient of 4.986: 0.014 from 5 in float64
    (off the kink there), but within bfloat16's rounding of 5, where burn's floor gives 5 and
    PyTorch's (computed in float32) 4. float64's one-sided differences agree at such a point, so
    the limits are taken across the rounding band (oracle/rounded_kinks.py): the float64
    y-gradient with x1's element moved out of the band to each side, between which both results
    lie. A default campaign (seed 23, program 24442) saved the program as burn's fault."""
    import json
    from pathlib import Path

    from difftest.oracle.kinks import rounded_band
    from difftest.program.jsonio import program_from_dict

    path = Path(__file__).parent / "data" / "remainder-bf16-rounded-kink-limits.json"
    verdict = check(program_from_dict(json.loads(path.read_text())), burn_worker)
    assert verdict.ok, verdict.report()
    dismissed = [m for m in verdict.dismissals if m.statement == "x1"]
    assert dismissed and dismissed[0].verdict == "ill-conditioned"
    assert rounded_band(verdict, dismissed[0]) == 2.0 * 2.0 ** -7


def test_a_value_computed_from_a_gradient_read_at_a_tie_is_judged_by_burn_s_conventions(
        burn_worker: BurnWorker) -> None:
    """maximum(detach(x), x) ties at every element, and moving x moves both operands: the
    one-sided differences agree. burn gives the tie's gradient to its first operand (the detached
    one), PyTorch splits it, so the sum of the gradient read is 0 in burn and 1 in PyTorch: burn's
    conventions composed, no finding (a 20,000-program campaign, seed 301, program 18245). A sum
    that is neither stays one."""
    from difftest.program.ir import Grad

    p = program(leaf("x", [0.5, 0.5], rg=True), cut("c", "detach", "x", region="no_grad"), op("v", "maximum", "c", "x"),
                backward("v", "bw"), Grad("g", "bw", "x"), op("s", "sum_dim", "g", dim=0))
    verdict = check(p, burn_worker)
    assert verdict.ok, verdict.report()
    assert {m.statement: m.verdict for m in verdict.mismatches}.get("s") == "ill-conditioned", verdict.report()
    burn_obs = replace(verdict.burn, values=tuple(
        replace(v, value=replace(v.value, data=(0.5,))) if v.id == "s" and v.value is not None else v
        for v in verdict.burn.values))
    assert _verdicts(p, verdict.torch, burn_obs)["s"] == "burn-wrong"


# relu6 exactly at its bounds 0 and 6, then a selu far below 0: the flat side of relu6 gives 0, the
# inner side selu'(-30) = 1.6e-13 and selu'(-24) = 6.6e-11, which the float64 differences cannot
# resolve under a loss of -1.76 (both read 0). burn takes the inner side at relu6's bounds
# (relu6-at-bounds), PyTorch the flat one; burn's result is its conventions composed.
RELU6_INTO_SELU = program(leaf("x", [0.0, 6.0, 3.0], rg=True), op("v", "relu6", "x"),
                          op("w", "add_scalar", "v", scalar=-30.0), op("y", "selu", "w"), backward("y"))


def test_relu6_at_a_bound_under_a_flat_selu_is_burns_conventions_composed(burn_worker: BurnWorker) -> None:
    v = check(RELU6_INTO_SELU, burn_worker)
    assert v.ok, v.report()
    assert any(d.verdict == "ill-conditioned" for d in v.dismissals), v.report()
    # a gradient off burn's composition at the bound stays a finding
    assert _verdicts(RELU6_INTO_SELU, v.torch, _with_grad(v.burn, "x", 0, 5e-13)).get("x") == "burn-wrong"
