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
from typing import TypeVar

from difftest.program.ir import Program, Statement

R = TypeVar("R")
RECENT = 16  # programs remembered per function (a program, its probes' prefixes and programs)


def remembered(fn: Callable[[Program], R]) -> Callable[[Program], R]:
    """`fn`, answering from memory for a program it was given among the last RECENT. The answer
    is shared: a caller that changes a mutable answer must copy it first."""
    recent: dict[int, tuple[Program, R]] = {}

    @functools.wraps(fn)
    def wrapper(program: Program) -> R:
        hit = recent.get(id(program))
        if hit is not None and hit[0] is program:
            return hit[1]
        out = fn(program)
        if len(recent) >= RECENT:
            del recent[next(iter(recent))]
        recent[id(program)] = (program, out)
        return out

    return wrapper


@remembered
def statements_by_id(program: Program) -> dict[str, Statement]:
    """`program.by_id()`, remembered (shared: not to be changed)."""
    return program.by_id()
