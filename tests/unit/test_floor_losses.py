"""A passing one-op program whose burn result lost an element that the screen's floor passed
(below float16's smallest normal value an element may lose its own size) suspects its op
(findings/deviation.py `floor_losses`, read by `deviant`); rounding in the subnormal range does
not. No built interpreter: burn's observation is PyTorch's, with the gradient edited, replayed."""

from __future__ import annotations

from typing import Any, cast

import torch

from difftest.exec.burn_worker import BurnWorker
from difftest.findings.deviation import SUSPECT_RATIO, deviant, floor_losses
from difftest.oracle.check import check
from difftest.oracle.compare import Verdict
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import DENORM_MIN
from difftest.program.ir import Program
from difftest.program.observation import Observation
from tests.programs import Replay, backward, leaf, op

SPACING = DENORM_MIN["float16"]


def _program(cotangent: float) -> Program:
    """The seeded one-op program of softplus (beta 1) at x = 10 and 1, its cotangent `cotangent`."""
    c = float(torch.tensor(cotangent, dtype=torch.float16))
    return Program((leaf("a0", [10.0, 1.0], rg=True), op("y", "softplus", "a0", beta=1.0), leaf("ct", [c, c]),
                    op("z", "mul", "y", "ct"), backward("z")), "float16")


def _verdict(program: Program, grad: Any) -> Verdict:
    """`program` judged with burn's observation PyTorch's (its flags the model's for burn), but
    a0's gradient `grad(PyTorch's)`."""
    t = run_torch(program)
    own = cast(BurnWorker, Replay(Observation.from_dict(t.to_dict(), "burn"), None))
    states = check(program, own).prediction.burn.states
    doc = t.to_dict()
    for value in doc["values"]:
        value["flags"] = dict(states[value["id"]].flags())
    g = doc["backwards"][0]["grads"]["a0"]
    g["data"] = grad(g["data"])
    return check(program, cast(BurnWorker, Replay(Observation.from_dict(doc, "burn"), None)))


def test_a_gradient_lost_below_the_floor_suspects_the_op_and_subnormal_rounding_does_not() -> None:
    # burn's gradient 0 where PyTorch and float64 give 3.5e-5 (below 6.1e-5): within the floor,
    # so the verdict passes without arbitration; the loss names the op's input as a suspect
    lost = _verdict(_program(3.5e-5), lambda g: [0.0, g[1]])
    assert lost.ok and not lost.dismissals and lost.reference is None, lost.report()
    found = deviant(lost, "grad")
    assert found is not None, lost.report()
    ratio, m = found
    assert ratio >= SUSPECT_RATIO and m.statement == "a0" and m.backward == "bw" and m.elements == (0,)
    assert m.verdict == "agreement" and lost.reference is not None  # the float64 run it was judged by
    assert deviant(lost, "value") is None  # the values are right
    # deep in the subnormal range (5 spacings), burn one and two spacings off PyTorch: rounding,
    # within the floor too, and no float64 run is made for it
    rounded = _verdict(_program(5 * SPACING), lambda g: [g[0] - 2 * SPACING, g[1] + SPACING])
    assert rounded.ok and rounded.burn.grad("bw", "a0") != rounded.torch.grad("bw", "a0"), rounded.report()
    assert deviant(rounded, "grad") is None and rounded.reference is None
    # 0 where PyTorch gives 3 spacings: a loss of the element's own size, but as small as what
    # rounding may lose there (under SUSPECT_RATIO half-spacings)
    flushed = _verdict(_program(3 * SPACING), lambda g: [0.0, g[1]])
    assert flushed.ok and floor_losses(flushed, "grad") == [], flushed.report()
