"""Subgradient conventions at non-differentiable points, found by running, kept as data.

At a kink or a tie both frameworks return *a* subgradient, but not always the same one. The
generator keeps inputs away from these points (see each op's domain in difftest/ops/domains.py),
and when a program lands on one anyway the float64 finite-difference check sees different left
and right slopes and classifies the disagreement `ill-conditioned`, not a finding.

Where both frameworks declare the same subgradient (relu and abs at 0) and a program's input is
exactly at the point, there is no choice: the oracle holds both to it (oracle/agreed_points.py).

Each entry records what each framework returns at the point (burn 0.22.1, PyTorch 2.15);
`tests/differential/test_conventions.py` re-measures them, so an entry that stops matching either framework
fails like a stale rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from difftest.divergences.knowledge import Knowledge

EVIDENCE = ("docs/semantics.md#upstream", "tests/differential/test_conventions.py")
F32_SIXTH = 0.1666666716337204  # 1/6 in float32, as both frameworks report it
SELU_SLOPE = 1.0507010221481323  # selu's gamma in float32
SELU_NEGATIVE_SLOPE = 1.7580993175506592  # gamma * alpha in float32


@dataclass(frozen=True)
class Convention:
    knowledge: Knowledge
    op: str
    inputs: tuple[tuple[float, ...], ...]  # one flat rank-1 input per operand
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    torch_grads: tuple[tuple[float, ...], ...] = ()  # per operand, of sum(op(inputs))
    burn_grads: tuple[tuple[float, ...], ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()  # per operand (empty: each input is rank 1)
    # per operand, whether it requires grad (empty: every operand); an untracked operand's grads are ()
    tracked: tuple[bool, ...] = ()

    def shape(self, i: int) -> tuple[int, ...]:
        return self.shapes[i] if self.shapes else (len(self.inputs[i]),)

    @property
    def tracks(self) -> tuple[bool, ...]:
        return self.tracked or (True,) * len(self.inputs)

    @property
    def name(self) -> str:
        return self.knowledge.name


def _convention(name: str, op: str, inputs: tuple[tuple[float, ...], ...], attrs: dict[str, Any],
                torch_grads: tuple[tuple[float, ...], ...], burn_grads: tuple[tuple[float, ...], ...],
                reason: str, shapes: tuple[tuple[int, ...], ...] = (), tracked: tuple[bool, ...] = ()) -> Convention:
    return Convention(Knowledge(name, "convention", "both", reason, EVIDENCE), op, inputs, attrs, torch_grads,
                      burn_grads, shapes, tracked)


def _update_tie(op: str, attrs: dict[str, Any], dest_tracked: bool) -> Convention:
    """A max/min update (scatter, select_assign, scatter_nd) of x = [1, 2, 3] at positions 0 and 2
    by values that tie x[0] and lose to x[2], with one operand tracked: PyTorch splits the tie
    between the destination and the value, so the tracked one gets half; burn gives each its
    whole gradient (burn-autodiff's data_won = data >= values, values_won = values >= data), which
    for one tracked operand is the subgradient where it wins. With both tracked the two sum to
    twice the output's gradient: the known bug minmax-update-tie-grad-to-both."""
    largest = op.endswith("max")
    values = (1.0, 0.0) if largest else (1.0, 5.0)
    role = "destination" if dest_tracked else "value"
    if dest_tracked:
        torch_grads: tuple[tuple[float, ...], ...] = ((0.5, 1.0, 1.0), ())
        burn_grads: tuple[tuple[float, ...], ...] = ((1.0, 1.0, 1.0), ())
    else:
        torch_grads, burn_grads = ((), (0.5, 0.0)), ((), (1.0, 0.0))
    return _convention(f"{op.replace('_', '-')}-tie-with-constant", op, ((1.0, 2.0, 3.0), values), attrs,
                       torch_grads, burn_grads,
                       f"{op} at a tie of a tracked {role} and a constant: PyTorch gives the "
                       f"{role} half the gradient, burn all of it (each tied operand gets the whole gradient)",
                       tracked=(dest_tracked, not dest_tracked))


_AT_0_2 = {"dim": 0, "indices": [0, 2]}
_SCATTER_AT_0_2 = {"dim": 0, "indices": {"shape": [2], "data": [0, 2]}}
_ND_AT_0_2 = {"indices": {"shape": [2, 1], "data": [0, 2]}}


CONVENTIONS: tuple[Convention, ...] = (
    _convention("leaky-relu-at-zero", "leaky_relu", ((0.0, 1.0),), {"slope": 0.125},
                ((0.125, 1.0),), ((1.0, 1.0),),
                "leaky_relu at 0: PyTorch takes the negative slope, burn the positive one"),
    _convention("maximum-tie", "maximum", ((1.0, 2.0), (1.0, 3.0)), {},
                ((0.5, 0.0), (0.5, 1.0)), ((1.0, 0.0), (0.0, 1.0)),
                "maximum of equal elements: PyTorch splits the gradient, burn gives it to the first operand"),
    _convention("minimum-tie", "minimum", ((1.0, 2.0), (1.0, 3.0)), {},
                ((0.5, 1.0), (0.5, 0.0)), ((1.0, 1.0), (0.0, 0.0)),
                "minimum of equal elements: PyTorch splits the gradient, burn gives it to the first operand"),
    _convention("max-tie", "max", ((2.0, 2.0, 1.0),), {},
                ((0.5, 0.5, 0.0),), ((1.0, 0.0, 0.0),), "full max: PyTorch spreads over ties, burn picks one"),
    _convention("min-tie", "min", ((1.0, 1.0, 2.0),), {},
                ((0.5, 0.5, 0.0),), ((1.0, 0.0, 0.0),), "full min: PyTorch spreads over ties, burn picks one"),
    _convention("clamp-at-bounds", "clamp", ((-0.5, 0.5, 0.0),), {"min": -0.5, "max": 0.5},
                ((0.0, 0.0, 1.0),), ((1.0, 1.0, 1.0),), "clamp at a bound: PyTorch's gradient is 0, burn's 1"),
    _convention("clamp-min-at-bound", "clamp_min", ((-0.5, 0.5),), {"min": -0.5},
                ((0.0, 1.0),), ((1.0, 1.0),), "clamp_min at the bound: PyTorch's gradient is 0, burn's 1"),
    _convention("clamp-max-at-bound", "clamp_max", ((-0.5, 0.5),), {"max": 0.5},
                ((1.0, 0.0),), ((1.0, 1.0),), "clamp_max at the bound: PyTorch's gradient is 0, burn's 1"),
    # the same at both: kept so a change on either side is noticed
    _convention("relu-at-zero", "relu", ((0.0, 1.0),), {}, ((0.0, 1.0),), ((0.0, 1.0),),
                "relu at 0: both give gradient 0 (kept so a change on either side is noticed)"),
    _convention("abs-at-zero", "abs", ((0.0, 1.0),), {}, ((0.0, 1.0),), ((0.0, 1.0),),
                "abs at 0: both give gradient 0 (kept so a change on either side is noticed)"),
    _convention("max-dim-tie", "max_dim", ((2.0, 2.0, 1.0),), {"dim": 0},
                ((1.0, 0.0, 0.0),), ((1.0, 0.0, 0.0),),
                "max_dim over a tie: both give the gradient to the first index"),
    # nn functions (avg_pool2d's count_include_pad, interpolate's align_corners and
    # nearest index rule agree in both values: tests/differential/test_nn_ops.py)
    _convention("max-pool2d-tie", "max_pool2d", ((1.0, 2.0, 2.0, 2.0, 0.0, 1.0),),
                {"kernel": [1, 3], "stride": [1, 3], "padding": [0, 0]},
                ((0.0, 1.0, 0.0, 1.0, 0.0, 0.0),), ((0.0, 1.0, 0.0, 1.0, 0.0, 0.0),),
                "max_pool2d over a tie inside a window: both give the gradient to the first maximum in "
                "row-major order (kept so a change on either side is noticed)", shapes=((1, 1, 2, 3),)),
    # the tensor ops, activations and losses (measured with difftest-burn and PyTorch 2.15)
    _convention("prelu-at-zero", "prelu", ((0.0, 1.0, -1.0), (0.25,)), {},
                ((0.25, 1.0, 0.25), (-1.0,)), ((1.0, 1.0, 0.25), (-1.0,)),
                "prelu at 0: PyTorch takes the weight (the negative side), burn 1"),
    _convention("hard-sigmoid-at-bounds", "hard_sigmoid", ((-3.0, 3.0, 0.0),), {},
                ((0.0, 0.0, F32_SIXTH),), ((F32_SIXTH, F32_SIXTH, F32_SIXTH),),
                "hard_sigmoid (alpha 1/6, beta 1/2) at x = -3 and 3: PyTorch's gradient is 0, burn's 1/6"),
    _convention("softplus-at-threshold", "softplus", ((20.0, 1.0),), {"beta": 1.0},
                ((1.0, 0.7310585975646973),), ((1.0, 0.7310585975646973),),
                "softplus where beta * x = 20, the threshold: both still take the identity's gradient 1 "
                "(kept so a change on either side is noticed)"),
    # burn sorts stably, descending (burn-flex topk_with_indices): a tie's first elements win;
    # PyTorch's CPU kernel selects by partial sort, whose pick among equals is its own ([2, 2, 1]
    # with k = 1 gives index 0 in both; [1, 1, 1, 1] gives 2)
    _convention("topk-tie", "topk", ((1.0, 1.0, 1.0, 1.0),), {"k": 1, "dim": 0},
                ((0.0, 0.0, 1.0, 0.0),), ((1.0, 0.0, 0.0, 0.0),),
                "topk over a tie: burn gives the gradient to the first tied elements, PyTorch to those "
                "its partial sort picks"),
    _convention("gather-topk-indices-tie", "gather_topk_indices", ((1.0, 1.0, 1.0, 1.0),), {"k": 2, "dim": 0},
                ((0.0, 0.0, 1.0, 1.0),), ((1.0, 1.0, 0.0, 0.0),),
                "x gathered at topk's indices over a tie: burn gives the gradient to the first tied "
                "elements, PyTorch to those its partial sort picks"),
    _convention("cummax-tie", "cummax", ((1.0, 3.0, 2.0, 3.0),), {"dim": 0},
                ((1.0, 2.0, 0.0, 1.0),), ((1.0, 2.0, 0.0, 1.0),),
                "cummax where a value ties the running maximum: both give that output's gradient to the "
                "last of the tied elements (kept so a change on either side is noticed)"),
    _convention("cummin-tie", "cummin", ((2.0, 1.0, 3.0, 1.0),), {"dim": 0},
                ((1.0, 2.0, 0.0, 1.0),), ((1.0, 2.0, 0.0, 1.0),),
                "cummin where a value ties the running minimum: both give that output's gradient to the "
                "last of the tied elements (kept so a change on either side is noticed)"),
    # the max/min updates at a tie with a constant: each op once, the destination or the values tracked
    _update_tie("select_min", _AT_0_2, True),
    _update_tie("select_max", _AT_0_2, False),
    _update_tie("scatter_min", _SCATTER_AT_0_2, False),
    _update_tie("scatter_max", _SCATTER_AT_0_2, True),
    _update_tie("scatter_nd_min", _ND_AT_0_2, True),
    _update_tie("scatter_nd_max", _ND_AT_0_2, False),
    # burn-tensor's composed activations (difftest/ops/activations.py): hardtanh and relu6 are
    # burn's clamp, which keeps its bounds inside; selu's mask is x >= 0, elu's and celu's x <= 0
    _convention("hardtanh-at-bounds", "hardtanh", ((-0.5, 0.5, 0.0),), {"min": -0.5, "max": 0.5},
                ((0.0, 0.0, 1.0),), ((1.0, 1.0, 1.0),),
                "hardtanh at min or max: PyTorch's gradient is 0, burn's 1 (burn's hardtanh is its clamp)"),
    _convention("relu6-at-bounds", "relu6", ((0.0, 6.0, 3.0),), {},
                ((0.0, 0.0, 1.0),), ((1.0, 1.0, 1.0),),
                "relu6 at 0 and 6: PyTorch's gradient is 0, burn's 1 (burn's relu6 is clamp(0, 6))"),
    _convention("selu-at-zero", "selu", ((0.0, 1.0),), {},
                ((SELU_NEGATIVE_SLOPE, SELU_SLOPE),), ((SELU_SLOPE, SELU_SLOPE),),
                "selu at 0: PyTorch takes the negative side's slope (gamma alpha), burn the positive one (gamma)"),
    _convention("elu-at-zero", "elu", ((0.0, 1.0),), {"alpha": 0.5}, ((0.5, 1.0),), ((0.5, 1.0),),
                "elu at 0: both take the negative side's slope, alpha (kept so a change on either side is noticed)"),
    _convention("hard-swish-at-bounds", "hard_swish", ((-3.0, 3.0, 0.0),), {},
                ((0.0, 1.0, 0.5),), ((-0.5, 1.5, 0.5),),
                "hard_swish at -3 and 3: PyTorch takes the outer side's slope (0 and 1), burn the inner "
                "one, x / 3 + 1 / 2 (x times hard_sigmoid, whose gradient at its bounds is burn's 1/6)"),
    _convention("threshold-at-threshold", "threshold", ((0.5, 1.0),), {"threshold": 0.5, "value": 2.0},
                ((0.0, 1.0),), ((0.0, 1.0),),
                "threshold exactly at the threshold: both take the value, gradient 0 (kept so a change on "
                "either side is noticed)"),
    _convention("hard-shrink-at-lambda", "hard_shrink", ((-0.5, 0.5, 1.0),), {"lambd": 0.5},
                ((0.0, 0.0, 1.0),), ((0.0, 0.0, 1.0),),
                "hard_shrink at -+lambda: both give 0 and gradient 0 (kept so a change on either side is noticed)"),
    _convention("soft-shrink-at-lambda", "soft_shrink", ((-0.5, 0.5, 1.0),), {"lambd": 0.5},
                ((0.0, 0.0, 1.0),), ((0.0, 0.0, 1.0),),
                "soft_shrink at -+lambda: both give gradient 0 (kept so a change on either side is noticed)"),
)
