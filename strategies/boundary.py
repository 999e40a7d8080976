"""Boundary leaf values: a share of leaves gets some elements from the edges of the value space.

Leaf data is drawn continuous and uniform (strategies/choices.py), so exact zeros, ties and the
points where an op changes behaviour almost never occur by chance; yet that is where autodiff
conventions and bugs live. As Hypothesis' own `floats()` favours boundaries, a leaf is, with
probability `GenConfig.p_boundary_leaf`, a boundary leaf: each of its elements is replaced, with
probability `P_ELEMENT`, by one of its boundary options:

* the values at the edges and kinks of the domain of the op the leaf is drawn for (its
  `Domain.boundary`, catalog data: relu's and abs's 0, clamp's half-integer grid, hard_sigmoid's
  +-3, exp's +-8, log's 0.05, a divisor's +-0.1, the probabilities' 0.05 and 0.95, ...);
* inside the leaf's range: 0, -0.0, +-1, the dtype's smallest normal magnitude and a subnormal
  one (both signs), and for a leaf drawn for no op the catalog's magnitude limit
  +-MAX_MAGNITUDE (every op input stays within it, so the dtype's own extremes are outside every
  domain);
* a tie: a copy of an earlier element of the same tensor (max/min/sort/topk/max_pool2d ties,
  softmax of equal logits), or of the element at the same position of the op's other input (a
  tie of maximum/minimum, x - y = 0).

A boundary leaf drawn for an op reaches that op's kink only now and then (one option of
about ten, and most ops take an existing value, not a fresh leaf), and an existing value is
at a kink mostly by structure (floor's integers, a difference of equal values) where the
gradient upstream of the kink vanishes, so a changed convention there (abs'(0) = 1) changes
nothing. So an op whose domain lists kink points takes, with probability
`GenConfig.p_kink_leaf` (0 by default; 0.25 in the profile "kinks"), a fresh first input that
is a kink leaf: each element, with probability KINK_ELEMENT, one of those points (`kink_options`,
`draw_kink`), the rest drawn as usual. Such a leaf requires grad as often as any other, so the
op's convention at the point meets a gradient, which the declared conventions and the oracle's
kink handling judge.

A float attribute with declared boundary values (`AttrSpec.boundary`: powf_scalar's integral
exponents, which burn dispatches to powi_scalar and its special cases; the 0 and 1 of scalars an
op may short-circuit; softplus' beta of 1) snaps to one when its drawn value lies within
`ATTR_SNAP` of it: no choice is added, so the choice sequence and every other draw stay as they
were, and a shrinker that moves the drawn value moves it off or onto the boundary.

Every choice is an ordinary choice of the sequence (a boolean per leaf, a boolean and an integer
per element), so programs replay and shrink; a shrinker goes toward "no boundary element" and
toward the first option (0 where the range holds it). An op's inputs must still lie in its
domain: with boundary values on, a domain tagged "kink" admits inputs exactly at a kink or tie
(`Domain.at_kinks`), which the oracle's kink handling and the declared conventions judge; never
one outside the domain. The profile "continuous" (`difftest fuzz --profile continuous`) turns it
all off.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from difftest.choices import Choices
from difftest.ops.domains import MAX_MAGNITUDE, Domain
from difftest.ops.spec import AttrSpec
from difftest.program.dtypes import round_to

P_ELEMENT = 0.35  # of a boundary leaf's elements, the share replaced by a boundary option
KINK_ELEMENT = 0.5  # of a kink leaf's elements, the share placed on one of its op's kink points
# a drawn float attribute this close to one of its boundary values becomes it (powf_scalar's
# exponent, uniform over [-2, 3], lands on each of its 7 values 0.8% of the times)
ATTR_SNAP = 0.02
TIE = "tie"  # an earlier element of the same tensor
PAIR = "pair"  # the element at the same position of the op's other input


@dataclass(frozen=True)
class Options:
    """What a boundary element may become: values (in order of simplicity), and ties."""

    values: tuple[float, ...]
    pair: tuple[float, ...] = ()  # the op's other input, flattened (empty: no pair ties)

    def draw(self, c: Choices, data: list[float]) -> tuple[list[float], int]:
        """`data` with some elements replaced by boundary options; and how many were."""
        out = list(data)
        kinds: list[float | str] = [*self.values, TIE]
        if self.pair:
            kinds.append(PAIR)
        replaced = 0
        for i in range(len(out)):
            if not c.boolean(P_ELEMENT):
                continue
            kind = kinds[c.integer(0, len(kinds) - 1)]
            if kind == TIE:
                if i == 0:
                    continue  # nothing earlier to tie with
                out[i] = out[c.integer(0, i - 1)]
            elif kind == PAIR:
                out[i] = self.pair[i % len(self.pair)]
            else:
                out[i] = float(kind)
            replaced += 1
        return out, replaced


def options(lo: float, hi: float, dtype: str, domain: Domain | None = None, index: int = 0,
            pair: Sequence[float] = ()) -> Options:
    """The boundary options of a leaf in [lo, hi] of `dtype`, drawn for input `index` of an op
    with `domain` (None: a leaf drawn for no op)."""
    tiny = float(torch.finfo(getattr(torch, dtype)).smallest_normal)  # a power of two in every dtype
    generic = [0.0, -0.0, 1.0, -1.0, tiny, -tiny, tiny / 16, -tiny / 16]  # tiny / 16: a subnormal
    if domain is None:
        generic += [MAX_MAGNITUDE, -MAX_MAGNITUDE]
    values = _edges(dtype, domain, index) if domain is not None else []
    for v in generic:  # exact in every dtype; kept where the leaf's range and the domain hold them
        inside = domain is None or (lo <= v <= hi and _admits(domain, index, v))
        if inside and not any(_same(v, w) for w in values):
            values.append(v)
    # the other input may be an op result the generator evaluated in float32: as a value of dtype
    return Options(tuple(values), tuple(round_to(x, dtype) for x in pair))


def kink_options(dtype: str, domain: Domain, index: int = 0) -> Options:
    """A kink leaf's options: only the points of `domain` (an op's, tagged "kink") listed for
    input `index` (relu's and abs's 0 and -0.0, floor's integers, clamp's grid, hard_sigmoid's
    +-3), each as a value of `dtype` the domain admits; no ties, no generic values. Empty when
    the domain lists no point for that input (its kinks are ties: max, sort, maximum)."""
    return Options(tuple(_edges(dtype, domain, index)))


def _edges(dtype: str, domain: Domain, index: int) -> list[float]:
    """The domain's edges and kink points for input `index`, each as a value of `dtype` still
    inside the domain (inside by declaration; rounding must not carry one out of it), once."""
    values: list[float] = []
    for v in domain.boundary_values(index):
        r = _inside_edge(v, dtype, domain, index)
        if r is not None and not any(_same(r, w) for w in values):
            values.append(r)
    return values


def draw_kink(c: Choices, opts: Options, data: list[float]) -> tuple[list[float], int]:
    """`data` with each element, with probability KINK_ELEMENT, replaced by one of `opts`'
    values; and how many were."""
    out = list(data)
    replaced = 0
    for i in range(len(out)):
        if opts.values and c.boolean(KINK_ELEMENT):
            out[i] = float(opts.values[c.integer(0, len(opts.values) - 1)])
            replaced += 1
    return out, replaced


def _admits(domain: Domain, index: int, v: float) -> bool:
    """Whether an input 0 of all `v` can be in `domain` (kinks admitted), as far as one element
    tells (a predicate that needs attributes or other inputs is not asked): it only saves the
    generator attempts that its domain check would refuse anyway."""
    if index:
        return True
    try:
        return domain.accepts([torch.tensor([v], dtype=torch.float64)], {}, at_kinks=True)
    except (KeyError, IndexError):
        return True


def _inside_edge(v: float, dtype: str, domain: Domain | None, index: int) -> float | None:
    """The edge `v` as a value of `dtype` that is still inside the domain, in the program's dtype
    and in float32 (which the generator evaluates in): the nearest value when the domain admits
    it, else the next one away from zero, else toward it (for a later input, whose predicate
    needs the other inputs, away from zero first: those edges are lower bounds of |y|)."""
    nearest = round_to(v, dtype)
    if nearest == v and round_to(v, "float32") == v:
        return v
    away, toward = _neighbour(v, dtype, 1.0), _neighbour(v, dtype, -1.0)
    order = [away, toward] if index else [nearest, away, toward]
    for r in order:
        if domain is None or (_admits(domain, index, r) and _admits(domain, index, round_to(r, "float32"))):
            return r
    return None


def _neighbour(v: float, dtype: str, direction: float) -> float:
    """The nearest value of `dtype` (and, rounded, of float32) beyond `v`, away from zero
    (`direction` 1) or toward it (-1)."""
    step = 2.0**-30
    while True:
        r = round_to(v * (1.0 + direction * step), dtype)
        f = round_to(r, "float32")
        if direction * (abs(r) - abs(v)) > 0 and direction * (abs(f) - abs(v)) >= 0:
            return r
        step *= 2


def _same(a: float, b: float) -> bool:
    """Equal, telling 0.0 from -0.0."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def snap_attrs(attrs: dict[str, Any], specs: Sequence[AttrSpec]) -> tuple[dict[str, Any], int]:
    """`attrs` with each float attribute within ATTR_SNAP of one of its boundary values set to
    it; and how many were."""
    out, snapped = dict(attrs), 0
    for a in specs:
        v = out.get(a.name)
        if not a.boundary or not isinstance(v, float):
            continue
        near = min(a.boundary, key=lambda b: abs(v - b))
        if v != near and abs(v - near) <= ATTR_SNAP:
            out[a.name] = near
            snapped += 1
    return out, snapped
