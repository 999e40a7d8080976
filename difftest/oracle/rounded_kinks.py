"""Kinks an op has only past a rounding in its own dtype, and their one-sided limits.

Some ops round an intermediate in the dtype they run in before a step function: burn's
remainder rounds x / y in bfloat16 before floor, so a quotient of 4.986 is 5.0 there, and the
y-gradient -floor(q) is -5 where PyTorch's half-precision kernel (computing in float32) gives -4.
Such an op's domain is told the dtype (domains.DTYPE_ATTR) and widens its kink gap by the
rounding; the element is then near a kink in that dtype only. The float64 one-sided differences
of kinks.py, taken at steps of 1e-4 and less, never cross such a kink: float64 has none there.

So the limits here are taken across the rounding band: the float64 result with the leaf element
(a gradient) or every leaf (a value) moved by twice the dtype's epsilon, relative, to each side,
far enough for the op's input to leave the band on either side. A gradient's limits are float64
gradients at those points (its derivative jumps there; a difference quotient across the jump
would measure the jump, not either side's gradient); a value's are its values there.
"""

from __future__ import annotations

import math
from dataclasses import replace

from difftest.oracle.finite_diff import value_sides
from difftest.oracle.pytorch import run as run_torch
from difftest.program.ir import Backward, Leaf, Program


def gradient_sides(program: Program, leaf_id: str, backward_id: str, element: int,
                   step: float) -> tuple[float, float] | None:
    """The float64 gradient of `leaf_id`'s element at `backward_id` with that element moved by
    -step and +step (relative, at least that much absolute): (left, right); None when a run
    fails or gives no such gradient."""
    by_id = program.by_id()
    leaf, bw = by_id.get(leaf_id), by_id.get(backward_id)
    if not isinstance(leaf, Leaf) or not isinstance(bw, Backward) or element >= len(leaf.data):
        return None
    prefix = program.statements[: program.statements.index(bw) + 1]
    x0 = leaf.data[element]
    out = []
    for sign in (-1.0, 1.0):
        data = list(leaf.data)
        data[element] = x0 + sign * step * max(abs(x0), 1.0)
        stmts = tuple(replace(s, data=tuple(data)) if s is leaf else s for s in prefix)
        try:
            obs = run_torch(Program(stmts, "float64"), "float64")
        except Exception:  # a moved input the program cannot take: no limits from it
            return None
        g = obs.grad_element(backward_id, leaf_id, element)
        if g is None or not math.isfinite(g):
            return None
        out.append(g)
    return out[0], out[1]


def value_limits(program: Program, statement: str, element: int, step: float) -> tuple[float, float] | None:
    """The float64 value of `statement`'s element with every leaf moved by -step and +step:
    (left, right); None when either is not finite."""
    sides = value_sides(program, statement, element, steps=(step,))
    if not sides:
        return None
    left, right, _ = sides[0]
    return (left, right) if math.isfinite(left) and math.isfinite(right) else None
