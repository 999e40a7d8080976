"""remainder and remainder_scalar: where the generator applies them, and the size of the terms
their value sums.

`remainder(x, y) = x - floor(x / y) * y` (the sign of y, both frameworks) jumps where x / y is an
integer, and its y-gradient -floor(x / y) with it; burn computes it as that difference, whose
terms cancel where the result is small against x.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from difftest.ops.domains import DTYPE_ATTR, KINK_GAP, Domain, Tensors
from difftest.program.dtypes import EPS

if TYPE_CHECKING:
    from torch import Tensor

Attrs = dict[str, Any]
MIN_DIVISOR = 0.1  # |y| of the tensor form
MIN_SCALAR = 0.25  # |s| of the scalar form
MAX_QUOTIENT = 100.0


def _off_integers(q: Tensor, dtype: str) -> bool:
    """|q| <= MAX_QUOTIENT and q keeps the kink gap from every integer, or twice the rounding of q
    in `dtype` where that is more: burn rounds the quotient in the op's dtype before floor
    (PyTorch's half-precision kernels compute in float32), so in bfloat16 floor(9.971) is 10."""
    frac = q - q.floor()
    gap = (EPS[dtype] * q.abs()).clamp(min=KINK_GAP)
    return bool((q.abs() <= MAX_QUOTIENT).all()) and bool(((frac > gap) & (frac < 1.0 - gap)).all())


def _remainder_ok(xs: Tensors, a: Attrs) -> bool:
    x, y = xs[0].double(), xs[1].double()
    return bool((y.abs() >= MIN_DIVISOR).all()) and _off_integers(x / y, a.get(DTYPE_ATTR, "float32"))


def _remainder_scalar_ok(xs: Tensors, a: Attrs) -> bool:
    s = float(a.get("scalar", 1.0))
    return abs(s) >= MIN_SCALAR and _off_integers(xs[0].double() / s, a.get(DTYPE_ATTR, "float32"))


REMAINDER = Domain(
    "remainder",
    "remainder(x, y) = x - floor(x / y) * y jumps where x / y is an integer, and its y-gradient "
    "-floor(x / y) with it: |y| >= 0.1, |x / y| <= 100 and x / y keeps a gap of 0.01 from integers",
    _remainder_ok,
    ((-3.0, 3.0), (0.25, 2.0)),
    tags=("kink",),
    boundary=((), (MIN_DIVISOR, -MIN_DIVISOR)),
)
REMAINDER_SCALAR = Domain(
    "remainder-scalar",
    "remainder(x, s) = x - floor(x / s) * s jumps where x / s is an integer: |s| >= 0.25, |x / s| <= 100 "
    "and x / s keeps a gap of 0.01 from integers",
    _remainder_scalar_ok,
    tags=("kink",),
)


def remainder_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # burn: x - floor(x / y) * y; where the result is small against x its terms cancel
    return x[0].abs() + (x[0] / x[1]).floor().abs() * x[1].abs()


def remainder_scalar_value(x: Sequence[Tensor], a: Attrs, dtype: str) -> Tensor:
    # the same, the divisor an attribute
    s = float(a["scalar"])
    return x[0].abs() + (x[0] / s).floor().abs() * abs(s)
