"""A function of a program remembered for the last few programs it was asked about, by identity.

A program is immutable, and checking one asks the same questions of the same object many times
(its values' dtypes, its shapes, which batch_norm forwards follow burn's inference path: the
model, every PyTorch run of it, the comparison). `remembered(fn)` answers a repeated question
from memory. Each entry holds its program, so its id cannot be reused by another object while
it is remembered; the oldest entry goes first. Torch-free.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Generic, TypeVar

from difftest.program.ir import Program, Statement

R = TypeVar("R")
RECENT = 16  # programs remembered per function (a program, its probes' prefixes and programs)


class Remembered(Generic[R]):
    """`fn`, answering from memory for a program it was given among the last RECENT. The answer
    is shared: a caller that changes a mutable answer must copy it first. `put` remembers an
    answer computed elsewhere (a caller that computed the same thing on the way to more)."""

    def __init__(self, fn: Callable[[Program], R]) -> None:
        self.fn = fn
        self.recent: dict[int, tuple[Program, R]] = {}
        functools.update_wrapper(self, fn)

    def __call__(self, program: Program) -> R:
        hit = self.recent.get(id(program))
        if hit is not None and hit[0] is program:
            return hit[1]
        out = self.fn(program)
        self.put(program, out)
        return out

    def put(self, program: Program, answer: R) -> None:
        recent = self.recent
        if id(program) not in recent and len(recent) >= RECENT:
            del recent[next(iter(recent))]
        recent[id(program)] = (program, answer)


def remembered(fn: Callable[[Program], R]) -> Remembered[R]:
    """`fn` remembered for the last RECENT programs (Remembered)."""
    return Remembered(fn)


@remembered
def statements_by_id(program: Program) -> dict[str, Statement]:
    """`program.by_id()`, remembered (shared: not to be changed)."""
    return program.by_id()
