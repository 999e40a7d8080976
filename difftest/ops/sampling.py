"""How the generator draws an op's attributes (given its first input's shape) and the shapes of
its inputs after the first (`Partners`): data of the catalog entries, written against the choice
interface (difftest/choices.py)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from difftest.choices import Choices
from difftest.program.dtypes import FLOAT_DTYPES
from difftest.program.ir import MAX_RANK, Shape, numel
from difftest.program.shapes import broadcast

Attrs = dict[str, Any]
AttrSampler = Callable[[Choices, Sequence[Shape]], "Attrs | None"]

# ---------------------------------------------------------------- attributes


def dim(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    return {"dim": c.integer(0, len(shapes[0]) - 1)}


def clamp(kind: str) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        lo, hi = sorted(c.floats(2, -2.0, 2.0))
        if hi - lo < 0.25:
            hi = lo + 0.25
        if c.boolean(0.2):  # on the half-integer grid, where the generator's boundary values lie
            lo, hi = math.floor(lo * 2) / 2, math.ceil(hi * 2) / 2
        return {"clamp": {"min": lo, "max": hi}, "clamp_min": {"min": lo}, "clamp_max": {"max": hi}}[kind]

    return draw


def reshape(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    n = numel(shapes[0])
    factors = [d for d in range(1, n + 1) if n % d == 0]
    rank = c.integer(1, MAX_RANK)
    out: list[int] = []
    rest = n
    for _ in range(rank - 1):
        f = c.choice([d for d in factors if rest % d == 0])
        out.append(f)
        rest //= f
    out.append(rest)
    return {"shape": out}


def swap(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    r = len(shapes[0])
    return {"dim1": c.integer(0, r - 1), "dim2": c.integer(0, r - 1)}


def permute(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    rest = list(range(len(shapes[0])))
    axes = []
    while rest:
        axes.append(rest.pop(c.integer(0, len(rest) - 1)))
    return {"axes": axes}


def unsqueeze(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    if len(shapes[0]) >= MAX_RANK:
        return None
    return {"dim": c.integer(0, len(shapes[0]))}


def squeeze(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    ones = [i for i, d in enumerate(shapes[0]) if d == 1]
    if not ones or len(shapes[0]) < 2:
        return None
    return {"dim": c.choice(ones)}


def flip(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    axes = [i for i in range(len(shapes[0])) if c.boolean()]
    return {"axes": axes or [0]}


def slice_ranges(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    ranges = []
    for i in range(c.integer(1, len(s))):
        a = c.integer(0, s[i] - 1)
        ranges.append([a, c.integer(a + 1, s[i])])
    return {"ranges": ranges}


def stack(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    if len(shapes[0]) >= MAX_RANK:
        return None
    return {"dim": c.integer(0, len(shapes[0]))}


def expand(c: Choices, shapes: Sequence[Shape]) -> Attrs | None:
    s = shapes[0]
    lead = c.integer(0, MAX_RANK - len(s))
    target = [c.integer(1, 3) for _ in range(lead)] + [d if d != 1 else c.integer(1, 3) for d in s]
    return {"shape": target}


def repeat(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    return {"dim": c.integer(0, len(shapes[0]) - 1), "times": c.integer(1, 3)}


def gather(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    ishape = list(s)
    ishape[d] = c.integer(1, 4)
    data = [c.integer(0, s[d] - 1) for _ in range(numel(tuple(ishape)))]
    return {"dim": d, "indices": {"shape": ishape, "data": data}}


def select(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    s = shapes[0]
    d = c.integer(0, len(s) - 1)
    return {"dim": d, "indices": [c.integer(0, s[d] - 1) for _ in range(c.integer(1, 4))]}


def mask(with_value: bool) -> AttrSampler:
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        s = shapes[0]
        mask = {"shape": list(s), "data": [c.boolean() for _ in range(numel(s))]}
        return {"mask": mask, "value": c.floats(1, -2.0, 2.0)[0]} if with_value else {"mask": mask}

    return draw


def dtype(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    """`cast`'s target: one of the float dtypes (the input's own one too: a no-op, declared in
    divergences/rules.py)."""
    return {"dtype": c.choice(list(FLOAT_DTYPES))}


def number(name: str, lo: float, hi: float, kind: str = "float") -> AttrSampler:
    """One number attribute, uniform in [lo, hi] (an int when `kind` is "int")."""
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        if kind == "int":
            return {name: c.integer(int(lo), int(hi))}
        return {name: c.floats(1, lo, hi)[0]}

    return draw


def signed(name: str, lo: float, hi: float) -> AttrSampler:
    """One float attribute of either sign, its magnitude uniform in [lo, hi]: a divisor, kept
    away from 0 on both sides (the sign drawn after the magnitude; a shrinker makes it positive)."""
    def draw(c: Choices, shapes: Sequence[Shape]) -> Attrs:
        v = c.floats(1, lo, hi)[0]
        return {name: -v if c.boolean() else v}

    return draw


def cat(c: Choices, shapes: Sequence[Shape]) -> Attrs:
    c.integer(0, 2)  # unused; kept so that seeded campaigns draw the programs they always have
    return dim(c, shapes)


# ---------------------------------------------------------------- inputs after the first

PartnerDraw = Callable[[Choices, Shape, Attrs, int], Iterator[Shape]]


@dataclass(frozen=True)
class Partners:
    """The shapes of an op's inputs after the first, given the first one's shape, the op's
    attributes and the largest dim size. `draw` is lazy (a generator): each shape is drawn just
    before the generator draws the input of that shape. The attributes are drawn after the
    partners, unless `after_attrs` (then `draw` sees them; before, it gets `{}`). `explicit`:
    for an op that broadcasts its inputs implicitly, the shapes they take with every broadcast
    made explicit (each input expanded to its own; the op's result unchanged), given their
    shapes; localisation runs the op on inputs expanded so to tell the op's own derivative from
    the reduction of a broadcast operand's gradient."""

    name: str
    draw: PartnerDraw
    after_attrs: bool = False
    explicit: Callable[[Sequence[Shape]], list[Shape]] | None = None


def _broadcasting(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    # drop some leading dims, set some dims to 1
    drop = c.integer(0, len(first) - 1) if c.boolean(0.3) else 0
    yield tuple(1 if c.boolean(0.2) else d for d in first[drop:])


def _matmul(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    batch = first[:-2] if c.boolean(0.7) else tuple(1 if c.boolean() else d for d in first[:-2])
    yield batch + (first[-1], c.integer(1, max_dim))


def _same(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    yield first


def _stacked(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    for _ in range(c.integer(0, 2)):
        yield first


def _concatenated(c: Choices, first: Shape, attrs: Attrs, max_dim: int) -> Iterator[Shape]:
    d = attrs["dim"]
    for _ in range(c.integer(0, 2)):
        yield first[:d] + (c.integer(1, max_dim),) + first[d + 1 :]


def _elementwise_explicit(shapes: Sequence[Shape]) -> list[Shape]:
    out = functools.reduce(broadcast, shapes)
    return [out for _ in shapes]


def _batch_explicit(shapes: Sequence[Shape]) -> list[Shape]:
    batch = functools.reduce(broadcast, [s[:-2] for s in shapes])
    return [tuple(batch) + tuple(s[-2:]) for s in shapes]


# a shape that broadcasts with the first
BROADCASTING = Partners("broadcasting", _broadcasting, explicit=_elementwise_explicit)
# [batch.., k, n] for a first input [batch.., m, k]
MATMUL = Partners("matmul", _matmul, explicit=_batch_explicit)
SAME_SHAPE = Partners("same-shape", _same)
STACKED = Partners("stacked", _stacked)  # 0 to 2 more of the first's shape
CONCATENATED = Partners("concatenated", _concatenated, after_attrs=True)  # 0 to 2, other sizes along dim


@dataclass(frozen=True)
class FirstInput:
    """The first input of an op that a random shape rarely fits: one exact rank (images,
    embedding tables: nn_shapes.py; [batch, classes] logits) and/or a size its attributes need
    (a dim of size 3 for a cross product). The generator takes existing values of `rank` (None:
    any rank >= the op's min_rank) and draws fresh first inputs with `draw`."""

    rank: int | None
    draw: Callable[[Choices], Shape]


def _with_size(lo: int, hi: int, min_rank: int, max_dim: int) -> Callable[[Choices], Shape]:
    def draw(c: Choices) -> Shape:
        shape = [c.integer(1, max_dim) for _ in range(c.integer(min_rank, 3))]
        shape[c.integer(0, len(shape) - 1)] = c.integer(lo, hi)
        return tuple(shape)

    return draw


def with_size(size: int, min_rank: int = 1, max_dim: int = 4) -> FirstInput:
    """Fresh first inputs of rank min_rank to 3 with one dim of `size`."""
    return FirstInput(None, _with_size(size, size, min_rank, max_dim))


def with_size_at_least(size: int, max_dim: int = 4) -> FirstInput:
    """Fresh first inputs of rank 1 to 3 with one dim of `size` to max_dim (a variance's
    dim of at least 2 elements)."""
    return FirstInput(None, _with_size(size, max_dim, 1, max_dim))


def _matrix(c: Choices) -> Shape:
    return (c.integer(1, 4), c.integer(1, 4))


MATRIX = FirstInput(2, _matrix)  # [batch, classes] and other exactly rank-2 inputs
