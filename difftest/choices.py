"""The small choice interface that program generators are written against.

Hypothesis implements it with `draw` (`difftest.strategies.choices.HypothesisChoices`);
campaigns use a seeded fast source (`difftest.strategies.choices.RandomChoices`). Generators only
ever ask for these four things (and `note` a statistic), so the same generator shrinks under
Hypothesis and runs fast under a plain PRNG.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Choices(Protocol):
    def integer(self, lo: int, hi: int) -> int:
        """An int in [lo, hi]; shrinks toward lo."""
        ...

    def boolean(self, p_true: float = 0.5) -> bool:
        """A bool; shrinks toward False."""
        ...

    def choice(self, options: Sequence[T]) -> T:
        """One of options; shrinks toward the first."""
        ...

    def floats(self, n: int, lo: float, hi: float) -> list[float]:
        """n float32-exact values in [lo, hi]; shrinks toward simple values."""
        ...

    def note(self, message: str) -> None:
        """Record a statistic/event for this example (Hypothesis `event`)."""
        ...
