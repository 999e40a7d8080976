"""Input domains: where an op is well-defined and well-conditioned in float32.

A domain is data: a name, the reason it exists, a predicate on concrete input values (the
generator evaluates programs as it grows them, so the predicate sees real numbers), and the
range fresh leaves are drawn from when an existing value does not fit. Torch-free at import:
predicates use tensor methods of their arguments.

Two more fields serve the generator's boundary values (strategies/boundary.py): `boundary`, per
input, the values at the domain's edges and kinks that lie inside it; and, for a domain tagged
"kink", `at_kinks`: the predicate with the kink points themselves admitted (an input exactly at
a kink or an exact tie, never one merely near it). A domain tagged "kink" keeps inputs off points
where the frameworks may pick different subgradients; exactly at such a point the oracle's kink
handling (difftest/oracle/kinks.py) and the declared conventions
(difftest/divergences/conventions.py) judge the result, so a program may visit it on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

Tensors = Sequence["Tensor"]
MAX_MAGNITUDE = 1.0e3  # every op input: finite and |x| <= this, so float32 keeps ~7 digits
KINK_GAP = 1.0e-2  # distance kept from non-differentiable points and ties
# the attribute under which the oracle gives a domain predicate the dtype its op runs in (the
# generator draws in float32 and gives none): a kink the op computes past a rounding in that
# dtype is that much wider
DTYPE_ATTR = "__dtype__"


@dataclass(frozen=True)
class Domain:
    name: str
    reason: str
    predicate: Callable[[Tensors, dict[str, Any]], bool]
    leaf_ranges: tuple[tuple[float, float], ...] = ((-3.0, 3.0),)
    tags: tuple[str, ...] = field(default=())
    # per input (the last one repeats; empty: none), values at this domain's edges and kinks
    boundary: tuple[tuple[float, ...], ...] = ()
    # the predicate with exact kink points and exact ties admitted (None: `predicate` alone)
    at_kinks: Callable[[Tensors, dict[str, Any]], bool] | None = None

    def accepts(self, xs: Tensors, attrs: dict[str, Any], at_kinks: bool = False) -> bool:
        """The inputs are finite, within MAX_MAGNITUDE and in the domain; with `at_kinks`, also
        when they sit exactly on a kink (`at_kinks` predicate) rather than off it."""
        for x in xs:
            # finite and |x| <= MAX_MAGNITUDE in one reduction: the max of |x| is NaN where x has
            # a NaN and inf where it has an infinity, and neither is <= MAX_MAGNITUDE
            if x.numel() and not float(x.abs().max()) <= MAX_MAGNITUDE:
                return False
        if at_kinks and self.at_kinks is not None:
            return bool(self.at_kinks(xs, attrs))
        return bool(self.predicate(xs, attrs))

    def boundary_values(self, index: int) -> tuple[float, ...]:
        if not self.boundary:
            return ()
        return self.boundary[min(index, len(self.boundary) - 1)]

    def leaf_range(self, index: int) -> tuple[float, float]:
        return self.leaf_ranges[min(index, len(self.leaf_ranges) - 1)]


def _all(xs: Tensors, f: Callable[[Tensor], Tensor], which: int | None = None) -> bool:
    chosen = xs if which is None else [xs[which]]
    return all(bool(f(x).all()) for x in chosen)


def off_or_on(d: Tensor) -> Tensor:
    """Elementwise: `d` (a distance to a kink, or between two values) keeps the kink gap or is
    exactly 0 (the point itself: a boundary value, never one merely near it)."""
    return (d.abs() >= KINK_GAP) | (d == 0)


def _frac_gap(x: Tensor, offset: float, exact: bool = False) -> Tensor:
    frac = (x.double() - offset).remainder(1.0)
    off = (frac > KINK_GAP) & (frac < 1.0 - KINK_GAP)
    return off | (frac == 0) if exact else off


def _unique_extreme(x: Tensor, dim: int | None, exact: bool = False) -> bool:
    if x.numel() < 2 and dim is None:
        return True
    if dim is None:
        flat = x.reshape(-1).double()
        top = flat.sort().values
        return _gap_ok(top[-1:] - top[-2:-1], exact) and _gap_ok(top[1:2] - top[0:1], exact)
    if x.shape[dim] < 2:
        return True
    s = x.double().sort(dim=dim).values
    n = x.shape[dim]
    hi_gap = s.narrow(dim, n - 1, 1) - s.narrow(dim, n - 2, 1)
    lo_gap = s.narrow(dim, 1, 1) - s.narrow(dim, 0, 1)
    return _gap_ok(hi_gap, exact) and _gap_ok(lo_gap, exact)


def _gap_ok(gap: Tensor, exact: bool) -> bool:
    """Every gap between neighbouring sorted values exceeds the kink gap (or, with `exact`, is 0:
    an exact tie)."""
    ok = gap > KINK_GAP
    return bool((ok | (gap == 0)).all() if exact else ok.all())


ANY = Domain("any", "defined everywhere", lambda xs, a: True)
EXP = Domain(
    "exp-range",
    "exp/sinh/cosh overflow float32 quickly; inputs kept in [-8, 8]",
    lambda xs, a: _all(xs, lambda x: x.abs() <= 8.0),
    boundary=((-8.0, 8.0),),
)
POSITIVE = Domain(
    "positive",
    "log/sqrt/powf need x > 0; kept >= 0.05 so derivatives stay moderate",
    lambda xs, a: _all(xs, lambda x: x >= 0.05, 0),
    ((0.1, 3.0), (-2.0, 2.0)),
    boundary=((0.05,), ()),
)
LOG1P = Domain("log1p", "log1p needs x > -1; kept >= -0.9", lambda xs, a: _all(xs, lambda x: x >= -0.9),
               boundary=((-0.9,),))
NONZERO = Domain(
    "nonzero",
    "reciprocal-like ops blow up near 0; |x| >= 0.1",
    lambda xs, a: _all(xs, lambda x: x.abs() >= 0.1, 0),
    ((0.2, 3.0),),
    boundary=((0.1, -0.1),),
)
DIVISOR = Domain(
    "divisor",
    "the divisor keeps |b| >= 0.1",
    lambda xs, a: _all(xs, lambda x: x.abs() >= 0.1, 1),
    ((-3.0, 3.0), (0.2, 3.0)),
    boundary=((), (0.1, -0.1)),
)
TAN = Domain("tan", "tan has poles at pi/2 + k*pi; |x| <= 1.2", lambda xs, a: _all(xs, lambda x: x.abs() <= 1.2),
             boundary=((-1.2, 1.2),))
UNIT_INTERIOR = Domain(
    "unit-interior",
    "asin/acos/atanh are defined on (-1, 1) and their derivatives blow up at +-1: |x| <= 0.9",
    lambda xs, a: _all(xs, lambda x: x.abs() <= 0.9),
    ((-0.85, 0.85),),
    boundary=((-0.9, 0.9, 0.0),),
)
ACOSH = Domain(
    "acosh",
    "acosh is defined for x >= 1 and its derivative blows up at 1: x >= 1.1",
    lambda xs, a: _all(xs, lambda x: x >= 1.1),
    ((1.2, 3.0),),
    boundary=((1.1,),),
)
ATAN2 = Domain(
    "atan2",
    "atan2(y, x) is singular at the origin and jumps by 2 pi across the negative x axis: "
    "|(y, x)| >= 0.1, and |y| >= 0.01 where x < 0",
    lambda xs, a: len(xs) < 2 or bool(((xs[0] * xs[0] + xs[1] * xs[1] >= 0.01)
                                       & ((xs[1] >= 0) | (xs[0].abs() >= KINK_GAP))).all()),
    boundary=((0.0, 1.0), (0.0, 1.0)),
)
HYPOT = Domain(
    "hypot",
    "hypot's gradient x / hypot(x, y) is 0 / 0 at the origin: |(x, y)| >= 0.1",
    lambda xs, a: len(xs) < 2 or bool((xs[0] * xs[0] + xs[1] * xs[1] >= 0.01).all()),
    boundary=((0.0, 1.0), (0.0, 1.0)),
)
KINK_AT_ZERO = Domain(
    "off-zero",
    "relu/abs/sign/leaky_relu are not differentiable at 0: inputs keep |x| >= 0.01 "
    "(the convention at 0 is checked separately, see rules)",
    lambda xs, a: _all(xs, lambda x: x.abs() >= KINK_GAP),
    tags=("kink",),
    boundary=((0.0, -0.0),),
    at_kinks=lambda xs, a: _all(xs, off_or_on),
)
ROUNDING = Domain(
    "off-integer",
    "floor/ceil jump at integers: inputs keep a gap of 0.01 from them",
    lambda xs, a: _all(xs, lambda x: _frac_gap(x, 0.0)),
    tags=("kink",),
    boundary=((0.0, 1.0, -1.0, 2.0),),
    at_kinks=lambda xs, a: _all(xs, lambda x: _frac_gap(x, 0.0, exact=True)),
)
ROUND_HALF = Domain(
    "off-half",
    "round jumps at half-integers (and ties go to even): inputs keep a gap of 0.01",
    lambda xs, a: _all(xs, lambda x: _frac_gap(x, 0.5)),
    tags=("kink",),
    boundary=((0.5, -0.5, 1.5, -2.5),),
    at_kinks=lambda xs, a: _all(xs, lambda x: _frac_gap(x, 0.5, exact=True)),
)
CLAMP = Domain(
    "off-bounds",
    "clamp is not differentiable at its bounds: inputs keep a gap of 0.01 from them",
    lambda xs, a: _all(
        xs,
        lambda x: ((x - a.get("min", -1e9)).abs() >= KINK_GAP) & ((x - a.get("max", 1e9)).abs() >= KINK_GAP),
    ),
    tags=("kink",),
    # the bounds are attributes drawn after the input: clamp's sampler puts them on the half-integer
    # grid at times (sampling.clamp), which these values are on
    boundary=((-1.5, -1.0, -0.5, 0.5, 1.0, 1.5),),
    at_kinks=lambda xs, a: _all(xs, lambda x: off_or_on(x - a.get("min", -1e9)) & off_or_on(x - a.get("max", 1e9))),
)
NO_TIES_PAIR = Domain(
    "no-ties",
    "maximum/minimum of equal values split the gradient differently: |a - b| >= 0.01",
    lambda xs, a: bool(((xs[0] - xs[1]).abs() >= KINK_GAP).all()),
    tags=("kink",),
    at_kinks=lambda xs, a: bool(off_or_on(xs[0] - xs[1]).all()),
)
UNIQUE_EXTREME = Domain(
    "unique-extreme",
    "max/min with ties split the gradient by convention: the extreme is unique by 0.01",
    lambda xs, a: _unique_extreme(xs[0], a.get("dim")),
    tags=("kink",),
    at_kinks=lambda xs, a: _unique_extreme(xs[0], a.get("dim"), exact=True),
)
PRODUCT = Domain(
    "product",
    "prod/cumprod gradients divide by the inputs: |x| in [0.25, 2]",
    lambda xs, a: _all(xs, lambda x: (x.abs() >= 0.25) & (x.abs() <= 2.0)),
    ((0.3, 1.8),),
    boundary=((0.25, -0.25, 2.0, -2.0, 1.0),),
)
POW_BASE = Domain(
    "pow-base",
    "x ** y for real y needs x > 0; base kept in [0.1, 4], exponent |y| <= 3",
    lambda xs, a: _all(xs, lambda x: (x >= 0.1) & (x <= 4.0), 0)
    and (len(xs) < 2 or _all(xs, lambda x: x.abs() <= 3.0, 1)),
    ((0.2, 3.0), (-2.0, 2.0)),
    boundary=((0.1, 4.0, 1.0), (-3.0, 3.0, 0.0)),
)
POWI_BASE = Domain(
    "powi-base",
    "x ** n: |x| <= 4 keeps x ** n small; negative n also needs |x| >= 0.1",
    lambda xs, a: _all(xs, lambda x: (x.abs() <= 4.0) & ((a.get("exponent", 1) >= 0) | (x.abs() >= 0.1))),
    ((0.2, 2.0),),
    boundary=((4.0, -4.0, 0.1, -0.1, 0.0),),
)
