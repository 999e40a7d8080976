"""Implementations of difftest's choice interface (`difftest.choices.Choices`): `HypothesisChoices`
(Hypothesis `draw`) and `RandomChoices` (a seeded PRNG)."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import event
from hypothesis import strategies as st

T = TypeVar("T")


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _f32_inward(lo: float, hi: float) -> tuple[float, float]:
    """The float32 range inside [lo, hi] (Hypothesis wants exactly representable bounds)."""

    def step(x: float, up: bool) -> float:
        bits = struct.unpack("<i", struct.pack("<f", x))[0]
        bits += 1 if (x >= 0) == up else -1
        return float(struct.unpack("<f", struct.pack("<i", bits))[0])

    a, b = _f32(lo), _f32(hi)
    if a < lo:
        a = step(a, True)
    if b > hi:
        b = step(b, False)
    return a, b


# Hypothesis draws bounded integers from a distribution that is uniform only within +-256 of 0
# (beyond, its density falls off), and `st.floats` favours 0, bounds and simple values (and
# `st.binary` gives all-zero bytes for about a third of its draws). So every integer drawn here
# stays within +-256: a boolean of probability p is a uniform integer in [0, 200) against a
# threshold; a fraction in [0, 1) is one of 512 levels (an integer in [-256, 255], 0 first), and
# a float is such a level plus a fixed offset inside it that depends on the element's position
# (uniform over the range, no two elements of a tensor equal by accident, one choice each).
# Generation then follows the probabilities, up to Hypothesis's own steering (its first examples
# are small, its prefixes explore branches evenly), and shrinking still goes toward 0: False,
# the first option, the float nearest 0.
_BOOL_RESOLUTION = 200  # p is rounded to a multiple of 1/200
LEVELS = 512


def unit_fraction(c: Any) -> float:
    """A uniform fraction in [0, 1) that shrinks toward 0: the source's own `fraction()` if it
    has one, else from two byte-sized integer choices."""
    fraction: Callable[[], float] | None = getattr(c, "fraction", None)
    if fraction is not None:
        return fraction()
    hi: int = c.integer(0, 255)
    lo: int = c.integer(0, 255)
    return (hi * 256 + lo) / 65536


def from_fraction(t: float, lo: float, hi: float) -> float:
    """Maps t in [0, 1) uniformly onto [lo, hi], t = 0 going to the value of [lo, hi] nearest
    0 (0 itself when the range holds it): values are uniform over the range and shrink toward 0.
    Returned as the nearest float32 inside the range."""
    width = hi - lo
    if lo <= 0.0 <= hi:
        p = t * width
        x = p if p <= hi else hi - p  # [0, hi] first, then (lo, 0) going down
    elif lo > 0.0:
        x = lo + t * width
    else:
        x = hi - t * width
    x = _f32(min(max(x, lo), hi))
    if x < lo or x > hi:  # rounding to float32 crossed a bound
        x = _f32(lo if x < lo else hi)
    return x


def _level(k: int) -> int:
    """An integer drawn from [-256, 255] as a level in [0, 512): 0, 1, ..., 255, then -256 ->
    256, ..., -1 -> 511 (so the shrinker's 0 is level 0)."""
    return k if k >= 0 else LEVELS + k


def _offset(i: int, level: int) -> float:
    """A fixed position in [0, 1) inside `level` for element i (an additive low-discrepancy
    sequence): the elements of a tensor spread over their levels instead of sitting on a grid."""
    return (i * 0.7548776662466927 + level * 0.5698402909980532) % 1.0


_INTEGERS: dict[tuple[int, int], st.SearchStrategy[int]] = {}
_LEVEL_LISTS: dict[int, st.SearchStrategy[list[int]]] = {}


def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    s = _INTEGERS.get((lo, hi))
    if s is None:
        s = _INTEGERS[(lo, hi)] = st.integers(lo, hi)
    return s


def _level_lists(n: int) -> st.SearchStrategy[list[int]]:
    s = _LEVEL_LISTS.get(n)
    if s is None:
        s = _LEVEL_LISTS[n] = st.lists(_integers(-LEVELS // 2, LEVELS // 2 - 1), min_size=n, max_size=n)
    return s


class HypothesisChoices:
    """Every choice is a Hypothesis draw, so programs shrink with Hypothesis's shrinker."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return int(self._draw(_integers(lo, hi)))

    def boolean(self, p_true: float = 0.5) -> bool:
        if p_true >= 1.0:
            return True
        if p_true <= 0.0:
            return False
        # a uniform integer in [0, 200): shrinks toward 0, i.e. toward False
        cut = min(max(round(_BOOL_RESOLUTION * (1.0 - p_true)), 1), _BOOL_RESOLUTION - 1)
        return int(self._draw(_integers(0, _BOOL_RESOLUTION - 1))) >= cut

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def fraction(self) -> float:
        """One of 512 levels in [0, 1), as one choice; shrinks toward 0."""
        return _level(self.integer(-LEVELS // 2, LEVELS // 2 - 1)) / LEVELS

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        """Uniform over [lo, hi], shrinking toward 0: one choice per element (a level and its
        fixed offset, see above), a tensor's drawn as one list."""
        lo, hi = _f32_inward(lo, hi)
        levels = [_level(k) for k in self._draw(_level_lists(n))]
        return [from_fraction((m + _offset(i, m)) / LEVELS if m else 0.0, lo, hi) for i, m in enumerate(levels)]

    def note(self, message: str) -> None:
        event(message)

    def group(self, fn: Callable[[], T]) -> T:
        """Runs `fn` (which draws through this object) as one Hypothesis span: the shrinker
        deletes, zeroes and reorders spans whole, so a statement drawn in a group goes away in
        one step however many choices it took."""
        return self._draw(_group(self, fn))  # type: ignore[no-any-return]


@st.composite
def _group(draw: st.DrawFn, choices: HypothesisChoices, fn: Callable[[], Any]) -> Any:
    outer = choices._draw
    choices._draw = draw
    try:
        return fn()
    finally:
        choices._draw = outer


class RandomChoices:
    """A fast seeded source for campaigns: same generator, no shrinking."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.events: dict[str, int] = {}

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def boolean(self, p_true: float = 0.5) -> bool:
        return self.rng.random() < p_true

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def fraction(self) -> float:
        return self.rng.random()

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        """Continuous uniform over [lo, hi] (float32)."""
        lo, hi = _f32_inward(lo, hi)
        return [from_fraction(self.rng.random(), lo, hi) for _ in range(n)]

    def note(self, message: str) -> None:
        self.events[message] = self.events.get(message, 0) + 1


def weighted(c: Any, options: Sequence[T], weights: Sequence[float]) -> T:
    """Pick by weight (equal weights: one uniform choice; else a uniform fraction); shrinks
    toward options[0]."""
    if len(set(weights)) == 1:
        return c.choice(options)  # type: ignore[no-any-return]
    total = sum(weights)
    k = unit_fraction(c) * total
    acc = 0.0
    for opt, w in zip(options, weights):
        acc += w
        if k < acc:
            return opt
    return options[-1]
