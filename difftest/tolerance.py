"""Tolerances that follow the program.

Each op belongs to a tolerance class with a per-dtype relative error (`rel`) it may add, and an
amplification factor (`amp`) by which it may magnify the relative error already present in its
inputs. The budget of a value is composed along its path from the leaves:

    budget(leaf) = 0
    budget(v)    = rel(class(v)) * size_factor(v) + amp(class(v)) * max(budget(inputs of v))

and a value passes when `|burn - torch| <= atol + budget * max(|burn|, |torch|, scale)`,
elementwise, where `scale` is the magnitude of the value's inputs (this absorbs cancellation:
a small difference of large numbers is only as precise as the large numbers). Gradients of a
program get `GRAD_FACTOR` times the largest value budget in the program plus their own class
budget, because a backward pass runs the same chain of ops again in reverse, and an absolute
allowance `CANCEL * max(1, the largest forward value or gradient)`: a gradient is a sum of
products of local derivatives and forward values, and when those terms cancel (the gradient of
`sum(softmax(x))` is exactly 0) the float32 result keeps noise of the terms' size.

This is the only place tolerances are defined; tests and comparison code never special-case
an op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

F32_EPS = 2.0**-23


@dataclass(frozen=True)
class ToleranceClass:
    name: str
    rel: float  # relative error the op itself may add (float32)
    amp: float = 1.0  # how much it may amplify incoming relative error
    grows_with_size: bool = False  # accumulations: error grows ~ sqrt(n) of the reduced extent
    reason: str = ""


EXACT = ToleranceClass("exact", 0.0, 1.0, reason="moves or selects values; no rounding")
ROUNDED = ToleranceClass("rounded", 4 * F32_EPS, 1.0, reason="one correctly rounded float op")
TRANSCENDENTAL = ToleranceClass(
    "transcendental", 64 * F32_EPS, 1.5, reason="libm-quality, implementations differ by ulps"
)
ACCUMULATE = ToleranceClass(
    "accumulate", 16 * F32_EPS, 1.5, True, reason="sums in an implementation-defined order"
)
STEP = ToleranceClass("step", 0.0, 0.0, reason="piecewise constant: exact away from jumps")

CLASSES = {c.name: c for c in (EXACT, ROUNDED, TRANSCENDENTAL, ACCUMULATE, STEP)}

ATOL = 1.0e-6
GRAD_FACTOR = 4.0
MIN_REL = 8 * F32_EPS  # floor for every compared value


def op_budget(cls: ToleranceClass, input_budgets: list[float], reduced_extent: int) -> float:
    own = cls.rel * (math.sqrt(max(reduced_extent, 1)) if cls.grows_with_size else 1.0)
    incoming = max(input_budgets, default=0.0)
    return own + cls.amp * incoming


def allowed(budget: float) -> float:
    return max(budget, MIN_REL)


CANCEL = 16 * F32_EPS


def cancellation_floor(term_scale: float) -> float:
    """Absolute allowance for a gradient whose terms are about `term_scale` in size: terms that
    cancel leave float32 noise of that size (documented above: gradients get their own budget)."""
    return CANCEL * max(term_scale, 1.0)


def grad_budget(value_budgets: list[float]) -> float:
    return GRAD_FACTOR * allowed(max(value_budgets, default=0.0)) + ACCUMULATE.rel * 8
