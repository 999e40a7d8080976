"""float16 gradients burn loses below the smallest normal value (6.1e-5), where the screen's floor
lets an element lose its own size (ops/tolerance.py `floor`): burn's softplus backward rounds
(g / beta) / (1 + exp(beta x)) below float16's subnormal spacing and multiplies it back by
exp(beta x) (the known bug softplus-f16-grad-underflow). The op's one-op program passes, so the
localiser names it as a suspect by the loss the floor screened (findings/deviation.py
`floor_losses`), and the record explains only what that quantisation explains."""

from __future__ import annotations

from difftest.exec.burn_worker import BurnWorker
from difftest.program.ir import Program
from tests.differential.triaging import saved_program, triaged
from tests.programs import backward, leaf, op

NAME = "softplus-f16-grad-underflow"


def test_a_float16_softplus_gradient_lost_below_the_floor_is_that_bug(workers: dict[str, BurnWorker]) -> None:
    """Seed 12, program 13,183 of the no-false-alarm campaign (float16): softplus (beta 0.723) of
    powf(4, 1.73) = 10.95 under a log_sigmoid. The gradient reaching softplus, 5.3e-5, is below
    float16's smallest normal value; burn's softplus backward loses it (0, PyTorch and float64
    5.3e-5), which the one-op program's floor screens, and powf's derivative lifts the loss above
    the floor at x2 and x3. It was signed graph@embedding, news."""
    t = triaged(workers, saved_program("seed-12-f16-softplus-grad-underflow.json"), None)
    loc = t.localisation
    assert loc is not None and loc.where == "softplus" and loc.confidence == "suspect", t.describe()
    assert loc.input == (0,) and loc.error == "zero", t.describe()
    assert t.known is not None and t.known.name == NAME, t.describe()


def test_a_wrong_float16_softplus_gradient_where_nothing_is_quantised_is_news(
        workers: dict[str, BurnWorker]) -> None:
    """softplus's gradient scaled by 1.03 (grad-scale:softplus:3e-2) where beta x <= 3 and the
    gradient reaching it is 1: nothing in burn's backward falls below 2^-14, so the record does
    not explain it, although it is localised to softplus in float16. (A scale of 1e-3 or 1e-2
    is within float16's budget here and shows nothing.)"""
    program = Program((leaf("x", [0.5, 1.0, -1.0, 2.0, 0.25, -0.5, 3.0, 1.5], rg=True),
                       op("y", "softplus", "x", beta=1.0), backward("y")), "float16")
    t = triaged(workers, program, "grad-scale:softplus:3e-2")
    assert t.localisation is not None and t.localisation.where == "softplus", t.describe()
    assert t.known is None, t.describe()
