"""Implementations of difftest's choice interface: Hypothesis `draw`, and a seeded PRNG."""

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


class HypothesisChoices:
    """Every choice is a Hypothesis draw, so programs shrink with Hypothesis's shrinker."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self._draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return int(self._draw(st.integers(lo, hi)))

    def boolean(self, p_true: float = 0.5) -> bool:
        if p_true >= 1.0:
            return True
        if p_true <= 0.0:
            return False
        # shrinks toward 0, i.e. toward False
        return int(self._draw(st.integers(0, 999))) >= round(1000 * (1.0 - p_true))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integer(0, len(options) - 1)]

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        lo, hi = _f32_inward(lo, hi)
        elem = st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False)
        return [_f32(float(x)) for x in self._draw(st.lists(elem, min_size=n, max_size=n))]

    def note(self, message: str) -> None:
        event(message)


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

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        out = []
        for _ in range(n):
            x = self.rng.uniform(lo, hi)
            if self.rng.random() < 0.3:
                x = round(x * 8) / 8  # short decimals, like Hypothesis's simplest floats
            out.append(_f32(min(max(x, lo), hi)))
        return out

    def note(self, message: str) -> None:
        self.events[message] = self.events.get(message, 0) + 1


def weighted(c: Any, options: Sequence[T], weights: Sequence[float]) -> T:
    """Pick by weight with one integer choice; shrinks toward options[0]."""
    total = sum(weights)
    scale = 1000
    k = c.integer(0, scale - 1)
    acc = 0.0
    for opt, w in zip(options, weights):
        acc += w / total * scale
        if k < acc:
            return opt
    return options[-1]
