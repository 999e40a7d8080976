"""burn's subgradient conventions composed: the float64 reference backward with burn's convention
at every op whose input sits exactly at a declared convention point (CONVENTIONS in
difftest/divergences/conventions.py).

At one kink the one-sided limits of the program bound both frameworks' subgradients, and the
kink check (kinks.py) accepts a result between them. At two non-differentiable points at once (a
tie that routes the gradient into a kink: gather_argmin of prelu(x) with x = 0 tied with another
0) the set of results each framework's per-op conventions give is larger than the hull of the
program's one-sided limits: PyTorch's prelu'(0) = weight and burn's 1 both compose with the tie's
routing, while moving x either way breaks the tie. burn's result is then no finding when it is
what burn's own conventions give, composed: this module computes that, in float64, by PyTorch's
backward with each such op's derivative taken where burn takes it.

burn's convention at an op is a side: the derivative of the op at its input moved by one ulp to
the side burn takes (prelu at 0: the positive side, slope 1; maximum of a tie: the first operand
the larger). The forward is unchanged; only the backward reads the moved input.
`tests/differential/test_compound_kinks.py` checks that each side reproduces the declared
burn gradients of its Convention, so the sides are data-checked like the conventions themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from difftest.divergences.bug_sites import MINMAX_UPDATES, writes_a_tie
from difftest.divergences.conventions import CONVENTIONS
from difftest.exec.torch_values import TorchModule, apply_module
from difftest.ops.catalog import CATALOG
from difftest.oracle.noise import MagnitudeHooks
from difftest.oracle.pytorch import run
from difftest.oracle.sites import OpSite, SiteHooks, op_site
from difftest.program.ir import Apply, OpCall, Program
from difftest.program.observation import Observation

Tensors = Sequence[torch.Tensor]


def _up(x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    return torch.where(where, torch.nextafter(x, torch.full_like(x, torch.inf)), x)


def _down(x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    return torch.where(where, torch.nextafter(x, torch.full_like(x, -torch.inf)), x)


def _first_extreme(x: torch.Tensor, largest: bool) -> torch.Tensor:
    """The first (row-major) extreme element moved one ulp beyond the others: burn's choice."""
    flat = x.reshape(-1)
    i = int(torch.argmax(flat) if largest else torch.argmin(flat))
    where = torch.zeros_like(flat, dtype=torch.bool)
    where[i] = True
    return (_up(flat, where) if largest else _down(flat, where)).reshape(x.shape)


def _ties(x: torch.Tensor) -> bool:
    flat = x.reshape(-1)
    return flat.numel() > 1 and int((flat == flat.max()).sum()) > 1


def _ties_min(x: torch.Tensor) -> bool:
    flat = x.reshape(-1)
    return flat.numel() > 1 and int((flat == flat.min()).sum()) > 1


def _tie_ranks(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Per element, how many earlier elements along `dim` equal it."""
    xt = x.movedim(dim, -1)
    n = xt.shape[-1]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)
    ranks = ((xt.unsqueeze(-1) == xt.unsqueeze(-2)) & earlier).sum(-1)
    return ranks.movedim(-1, dim)


def _stable_first(x: torch.Tensor, dim: int) -> torch.Tensor:
    """`x` with each element tied with earlier ones along `dim` lowered by as many ulps as they
    are (a float64 value's ulps: far below a float32 value's gap to its neighbours), so that any
    selection of the largest takes a tie's first elements, as burn's stable sort does."""
    ranks = _tie_ranks(x, dim).to(x.dtype)
    ulp = torch.nextafter(x, torch.full_like(x, torch.inf)) - x
    return x - ranks * ulp


def _tied_along(xs: Tensors, a: dict[str, Any], t: Tracked) -> bool:
    return bool((_tie_ranks(xs[0], a["dim"]) > 0).any())


Tracked = tuple[bool, ...]  # per input, whether the program tracks it (the backward reaches it)


@dataclass(frozen=True)
class Side:
    """burn's convention at an op: whether its inputs sit exactly at the convention's point, and
    the inputs moved to burn's side there (elsewhere as they are); both may depend on which
    inputs are tracked."""

    at_point: Callable[[Tensors, dict[str, Any], Tracked], bool]
    move: Callable[[Tensors, dict[str, Any], Tracked], list[torch.Tensor]]


def _at_zero(xs: Tensors, a: dict[str, Any], t: Tracked) -> bool:
    return bool((xs[0] == 0).any())


def _update_tie_with_constant(xs: Tensors, a: dict[str, Any], t: Tracked) -> bool:
    """A max/min update (scatter, select_assign, scatter_nd) with exactly one of its destination
    and values tracked, writing a value equal to the destination element it lands on. burn gives a
    tie's whole gradient to each operand (data_won = data >= values, values_won = values >= data),
    which for one tracked operand is the subgradient where that operand wins; with both tracked
    the two gradients sum to twice the output's (the known bug minmax-update-tie-grad-to-both),
    which no side reproduces."""
    if len(t) != 2 or sum(t) != 1:
        return False
    return writes_a_tie(a, xs[0].reshape(-1).tolist(), xs[1].reshape(-1).tolist(),
                        [tuple(xs[0].shape), tuple(xs[1].shape)])


def _tracked_wins(largest: bool) -> Callable[[Tensors, dict[str, Any], Tracked], list[torch.Tensor]]:
    """The tracked operand moved one ulp towards winning at every element (the update's gradient
    depends on the values only through which operand wins, so moving all moves the ties)."""
    def move(xs: Tensors, a: dict[str, Any], t: Tracked) -> list[torch.Tensor]:
        every = [torch.ones_like(x, dtype=torch.bool) for x in xs]
        return [(_up(x, w) if largest else _down(x, w)) if on else x for x, w, on in zip(xs, every, t, strict=True)]
    return move


def _bounds(xs: Tensors, a: dict[str, Any], t: Tracked = ()) -> tuple[torch.Tensor, torch.Tensor]:
    x = xs[0]
    return (x == a["min"]) if "min" in a else torch.zeros_like(x, dtype=torch.bool), \
        (x == a["max"]) if "max" in a else torch.zeros_like(x, dtype=torch.bool)


SIDES: dict[str, Side] = {
    # the positive side at 0 (slope 1)
    "prelu": Side(_at_zero, lambda xs, a, t: [_up(xs[0], xs[0] == 0), *xs[1:]]),
    "leaky_relu": Side(_at_zero, lambda xs, a, t: [_up(xs[0], xs[0] == 0)]),
    # inside the bounds (slope 1)
    **{op: Side(lambda xs, a, t: any(bool(w.any()) for w in _bounds(xs, a)),
                lambda xs, a, t: [_down(_up(xs[0], _bounds(xs, a)[0]), _bounds(xs, a)[1])])
       for op in ("clamp", "clamp_min", "clamp_max")},
    # burn's hardtanh and relu6 are its clamp: inside the bounds (slope 1)
    "hardtanh": Side(lambda xs, a, t: any(bool(w.any()) for w in _bounds(xs, a)),
                     lambda xs, a, t: [_down(_up(xs[0], _bounds(xs, a)[0]), _bounds(xs, a)[1])]),
    "relu6": Side(lambda xs, a, t: bool(((xs[0] == 0) | (xs[0] == 6)).any()),
                  lambda xs, a, t: [_down(_up(xs[0], xs[0] == 0), xs[0] == 6)]),
    # selu's mask x >= 0: the positive side at 0 (slope gamma)
    "selu": Side(_at_zero, lambda xs, a, t: [_up(xs[0], xs[0] == 0)]),
    **{op: Side(lambda xs, a, t: bool(((xs[0] == -3) | (xs[0] == 3)).any()),
                lambda xs, a, t: [_down(_up(xs[0], xs[0] == -3), xs[0] == 3)])
       for op in ("hard_sigmoid", "hard_swish")},
    # a tie goes wholly to the first operand: it moved one ulp ahead (the gradients of
    # maximum/minimum do not depend on the values, so moving every element is moving the ties)
    "maximum": Side(lambda xs, a, t: bool((xs[0] == xs[1]).any()),
                    lambda xs, a, t: [_up(xs[0], torch.ones_like(xs[0], dtype=torch.bool)), xs[1]]),
    "minimum": Side(lambda xs, a, t: bool((xs[0] == xs[1]).any()),
                    lambda xs, a, t: [_down(xs[0], torch.ones_like(xs[0], dtype=torch.bool)), xs[1]]),
    # a tie of the full max/min goes wholly to its first element
    "max": Side(lambda xs, a, t: _ties(xs[0]), lambda xs, a, t: [_first_extreme(xs[0], True)]),
    "min": Side(lambda xs, a, t: _ties_min(xs[0]), lambda xs, a, t: [_first_extreme(xs[0], False)]),
    # a tie's first elements are the largest (burn's stable descending sort)
    **{op: Side(_tied_along, lambda xs, a, t: [_stable_first(xs[0], a["dim"])])
       for op in ("topk", "gather_topk_indices")},
    # a max/min update's tie of a tracked operand with a constant goes wholly to the tracked one
    **{op: Side(_update_tie_with_constant, _tracked_wins(op.endswith("max"))) for op in MINMAX_UPDATES},
}

# the declared convention each side stands for (those where the frameworks differ)
CONVENTION_OF: dict[str, str] = {c.op: c.name for c in CONVENTIONS if c.torch_grads != c.burn_grads}


@dataclass(frozen=True)
class BugModel:
    """What burn computes where a known bug strikes, for triage to compose into the reference: a
    finding whose every burn-wrong element this reproduces is that bug's, whichever op the
    localiser reached (findings/reproduced.py). Never part of the oracle's own judgment: a
    result only a bug model reproduces stays a finding. `bug` names its record (known_bugs.py);
    `at_point` is where it strikes; `move_for(i, ...)` are the inputs moved so that input i's
    gradient is burn's there (each input's backward taken on its own side)."""

    bug: str
    at_point: Callable[[Tensors, dict[str, Any], Tracked], bool]
    move_for: Callable[[int, Tensors, dict[str, Any], Tracked], list[torch.Tensor]]


def _update_tie_of_tracked(xs: Tensors, a: dict[str, Any], t: Tracked) -> bool:
    """A max/min update with both operands tracked, writing a value equal to the destination
    element it lands on."""
    return len(t) == 2 and all(t) and writes_a_tie(a, xs[0].reshape(-1).tolist(), xs[1].reshape(-1).tolist(),
                                                   [tuple(xs[0].shape), tuple(xs[1].shape)])


def _each_wins(largest: bool) -> Callable[[int, Tensors, dict[str, Any], Tracked], list[torch.Tensor]]:
    """burn's data_won = data >= values, values_won = values >= data: at a tie each operand wins,
    so input i's gradient is the one where it alone moved one ulp towards winning."""
    def move_for(i: int, xs: Tensors, a: dict[str, Any], t: Tracked) -> list[torch.Tensor]:
        return _tracked_wins(largest)(xs, a, tuple(j == i for j in range(len(xs))))
    return move_for


BUG_MODELS: dict[str, BugModel] = {
    op: BugModel("minmax-update-tie-grad-to-both", _update_tie_of_tracked, _each_wins(op.endswith("max")))
    for op in MINMAX_UPDATES
}


def side_at_point(st: OpCall, inputs: Tensors, attrs: dict[str, Any]) -> Side | None:
    """burn's side of `st` when its inputs sit exactly at a point where burn's declared convention
    differs from PyTorch's, else None."""
    side = SIDES.get(st.op)
    if side is None or st.op not in CONVENTION_OF or not side.at_point([x.detach() for x in inputs], attrs,
                                                                       tracked(inputs)):
        return None
    return side


def tracked(inputs: Tensors) -> Tracked:
    """Per input of an op in a run, whether the run's backward reaches it."""
    return tuple(bool(x.requires_grad) and torch.is_grad_enabled() for x in inputs)


class _BurnSide(torch.autograd.Function):
    """The op's forward on its inputs; each input's gradient from the backward on the inputs
    moved for that input (`move_for(i, xs)`): burn's side of a convention (the same move for
    every input), or a modelled bug's (BugModel.move_for: each input its own)."""

    @staticmethod
    def forward(ctx: Any, lower: Callable[[Tensors], torch.Tensor],
                move_for: Callable[[int, Tensors], list[torch.Tensor]], *xs: torch.Tensor) -> torch.Tensor:
        ctx.lower, ctx.move_for = lower, move_for
        ctx.save_for_backward(*xs)
        return lower(xs)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xs = ctx.saved_tensors
        out: list[torch.Tensor | None] = [None, None]
        for i, need in enumerate(ctx.needs_input_grad[2:]):
            if not need:
                out.append(None)
                continue
            with torch.enable_grad():
                moved = [x.detach().requires_grad_(j == i) for j, x in enumerate(ctx.move_for(i, xs))]
                out.append(torch.autograd.grad(ctx.lower(moved), moved[i], g, allow_unused=True)[0])
        return tuple(out)


class BurnConventionHooks(SiteHooks):
    """Executor hooks of a float64 run whose backward takes burn's side at every op exactly at a
    convention point; `used` collects those ops' statement ids."""

    def __init__(self, with_bugs: bool = False) -> None:
        self.used: dict[str, str] = {}  # statement id -> convention name (or modelled bug's: BUG_MODELS)
        self.with_bugs = with_bugs

    def on_site(self, site: OpSite, inputs: Tensors, compute: Callable[[Tensors], torch.Tensor]) -> torch.Tensor:
        return compute(inputs)

    def module(self, st: Apply, handle: TorchModule, x: torch.Tensor, native: str) -> torch.Tensor:
        return apply_module(handle, x)

    def op(self, st: OpCall, inputs: Tensors, attrs: dict[str, Any], dtypes: dict[str, str],
           native: str) -> torch.Tensor:
        out = on_burns_side(st, inputs, attrs)
        if out is not None:
            self.used[st.id] = CONVENTION_OF[st.op]
            return out
        model = BUG_MODELS.get(st.op) if self.with_bugs else None
        t = tracked(inputs)
        if model is None or not model.at_point([x.detach() for x in inputs], attrs, t):
            return CATALOG[st.op].lower(inputs, attrs)
        self.used[st.id] = model.bug
        spec = CATALOG[st.op]
        result: torch.Tensor = _BurnSide.apply(lambda xs: spec.lower(xs, attrs),
                                                  lambda i, xs: model.move_for(i, xs, attrs, t), *inputs)
        return result


def on_burns_side(st: OpCall, inputs: Tensors, attrs: dict[str, Any]) -> torch.Tensor | None:
    """The op `st` on `inputs`, its backward taken on burn's side, when its inputs sit exactly at
    a point where burn's declared convention differs from PyTorch's; None otherwise."""
    side = side_at_point(st, inputs, attrs)
    if side is None:
        return None
    spec, t = CATALOG[st.op], tracked(inputs)
    out: torch.Tensor = _BurnSide.apply(lambda xs: spec.lower(xs, attrs),
                                     lambda i, xs: side.move(xs, attrs, t), *inputs)
    return out


# the last program's conventions run: the oracle and the localiser ask for it element by element,
# and it does not depend on the element (kept with its program, so that identity is a sound key)
_LAST_RUN: list[tuple[Program, bool, Observation | None, dict[str, str]]] = []


def _conventions_run(program: Program, with_bugs: bool = False) -> tuple[Observation | None, dict[str, str]]:
    """`program` in float64 with burn's convention at every op exactly at a convention point (and,
    `with_bugs`, burn's behaviour where a modelled known bug strikes; None when the run fails),
    and those ops (statement id -> convention or bug)."""
    if _LAST_RUN and _LAST_RUN[0][0] is program and _LAST_RUN[0][1] == with_bugs:
        return _LAST_RUN[0][2], _LAST_RUN[0][3]
    hooks = BurnConventionHooks(with_bugs)
    try:
        obs: Observation | None = run(program, "float64", hooks=hooks)
    except Exception:
        obs = None
    _LAST_RUN[:] = [(program, with_bugs, obs, hooks.used)]
    return obs, hooks.used


def burn_convention_gradient(program: Program, leaf: str, backward: str, element: int,
                             with_bugs: bool = False) -> tuple[float, dict[str, str]] | None:
    """The float64 gradient of `leaf`'s element at `backward` with burn's convention at every op
    exactly at a convention point (`with_bugs`: and the modelled known bugs' behaviour where they
    strike), and those ops (statement id -> convention or bug); None when no op sits at one or
    the run fails."""
    obs, used = _conventions_run(program, with_bugs)
    if obs is None or not used:
        return None
    g = obs.grad_element(backward, leaf, element)
    return (g, used) if g is not None else None


def burn_convention_value(program: Program, ident: str, element: int) -> tuple[float, dict[str, str]] | None:
    """The same run's value of `ident`'s element: a value computed from a gradient read, with
    burn's convention at every op exactly at a convention point on the read's backward; None when
    no op sits at one or the run fails."""
    obs, used = _conventions_run(program)
    v = obs.value(ident) if obs is not None else None
    if not used or v is None or v.value is None or not 0 <= element < len(v.value.data):
        return None
    return v.value.data[element], used


class BurnMagnitudeHooks(MagnitudeHooks):
    """The magnitude run (noise.py) with burn's side at every op exactly at a convention point:
    per gradient element, the size of the terms burn's composition sums (where PyTorch's
    convention sends no gradient, as clamp at its bound, burn's may carry terms that cancel)."""

    def op(self, st: OpCall, inputs: Tensors, attrs: dict[str, Any], dtypes: dict[str, str],
           native: str) -> torch.Tensor:
        spec = CATALOG[st.op]
        side = side_at_point(st, inputs, attrs)
        if side is None:
            return super().op(st, inputs, attrs, dtypes, native)

        t = tracked(inputs)

        def moved(xs: Tensors) -> torch.Tensor:  # burn's side, moved by a constant (no gradient of the move)
            to = side.move([x.detach() for x in xs], attrs, t)
            return spec.lower([x + (t - x.detach()) for x, t in zip(xs, to)], attrs)

        return self.on_site(op_site(st, inputs, attrs, dtypes, native), inputs, moved)


_LAST_TERMS: list[tuple[Program, Observation | None]] = []


def burn_convention_terms(program: Program, leaf: str, backward: str, element: int) -> float:
    """The size of the terms burn's composed conventions sum into `leaf`'s element at `backward`
    (BurnMagnitudeHooks); 0 when the run fails or has no such gradient. The run is the last
    program's when it is asked again (as `_conventions_run`)."""
    if not (_LAST_TERMS and _LAST_TERMS[0][0] is program):
        try:
            obs: Observation | None = run(program, "float64", hooks=BurnMagnitudeHooks())
        except Exception:  # no measurement: no budget from it
            obs = None
        _LAST_TERMS[:] = [(program, obs)]
    obs = _LAST_TERMS[0][1]
    g = obs.grad_element(backward, leaf, element) if obs is not None else None
    return abs(g) if g is not None else 0.0
