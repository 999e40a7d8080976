"""Per-element budgets, from the rounding noise of each element's own computation.

Nothing here is program-wide. An element of a value or a gradient is compared in two steps:

1. **Screen.** burn and PyTorch agree to `SCREEN` (a few float32 ulps of the element's own
   magnitude): nothing to arbitrate. A 1e-4 relative fault is ~840 ulps, far outside.
2. **Judge** (numerics.py), for the elements that fail the screen. For a gradient element, the
   budget also allows `TERMS_ULPS` ulps of the sum of the magnitudes of the terms it adds up,
   measured by a float64 backward of |J|^T |g| (`noise.magnitude_run`): where terms cancel, a
   few ulps of their size remain in any float32 result, whichever formula computes them. A float64 PyTorch run gives
   the reference `r`. `NOISE_SAMPLES` float64 runs of the same program with Monte Carlo rounding
   noise injected at every op boundary (noise.py) measure, per element, how much float32
   rounding *this very computation* carries, cancellation and reduction lengths included:
   `D` is the largest deviation of a noisy run from `r`. A float32 result is within its budget
   when `|x - r| <= NOISE_FACTOR * D + FLOOR_ULPS * eps * |r| + TINY`.

Each op's own float32 rounding is measured: the op runs again in float32 on the same inputs,
forward and backward, and `MEASURED_FACTOR * u * |float32 - float64|` is added (u uniform in
[-1, 1], shared with the op's accumulation noise); this sees what no class can declare, such as
gelu's `1 + erf(x)` cancelling in the tail or tanh's backward `1 - y**2` near |y| = 1. On top of
it, the noise injected per op is declared by its tolerance class (below), for implementations
that round differently: a relative error on the op's output (`rel`), on its inputs (`input_rel`:
ops whose internals round intermediate values, e.g. log_softmax's `x - logsumexp(x)`), and, for
accumulating ops, an absolute error `eps * sqrt(n) * (the op applied to the magnitudes of its
inputs)`, the size of a float32 sum of n terms. Gradients get a relative error of at least
`BACKWARD_REL` at every op boundary (the backward pass rounds too, and sums what reaches a value
along several paths).

**Dtypes.** Every size above is declared for float32 and scales with the dtype the program
runs in (`scale`: its eps over float32's; float64 ~1e-16, float16 ~1e-3, bfloat16 ~8e-3):
the noise runs inject noise of that size and measure each op's own rounding in that dtype,
and the screen and the budget's floor count that dtype's ulps. For float32 the scale is
exactly 1: its budgets are unchanged. The float64 arbiter decides in every dtype.

This is the only place tolerances are defined; tests and comparison code never special-case
an op.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from difftest.program.dtypes import DENORM_MIN, EPS
from difftest.program.dtypes import TINY as DTYPE_TINY

F32_EPS = 2.0**-23


@dataclass(frozen=True)
class ToleranceClass:
    name: str
    rel: float  # relative rounding error of the op's output (float32)
    input_rel: float = 0.0  # relative error the op's internals behave as if its inputs had
    grows_with_size: bool = False  # accumulations: absolute error ~ eps * sqrt(n) * sum |terms|
    reason: str = ""


EXACT = ToleranceClass("exact", 0.0, reason="moves or selects values; no rounding")
ROUNDED = ToleranceClass("rounded", F32_EPS, reason="one correctly rounded float op")
TRANSCENDENTAL = ToleranceClass(
    "transcendental", 4 * F32_EPS, F32_EPS, reason="libm-quality, implementations differ by ulps"
)
ACCUMULATE = ToleranceClass(
    "accumulate", F32_EPS, 0.0, True, reason="sums in an implementation-defined order"
)
STEP = ToleranceClass("step", 0.0, reason="piecewise constant: exact away from jumps")

CLASSES = {c.name: c for c in (EXACT, ROUNDED, TRANSCENDENTAL, ACCUMULATE, STEP)}

BACKWARD_REL = F32_EPS  # relative noise on every gradient crossing an op boundary
GRAD_TERMS_FACTOR = 4.0  # gradients of composite and accumulating ops: eps * this * sum |terms|
MEASURED_FACTOR = 2.0  # an op's own float32 rounding, measured, may be this much larger in burn
SCREEN = 8 * F32_EPS  # elements this close (relative to themselves) are not arbitrated
NOISE_SAMPLES = 4  # noisy float64 runs per arbitrated program
NOISE_FACTOR = 8.0  # budget = NOISE_FACTOR x the largest measured deviation ...
FLOOR_ULPS = 2.0  # ... + this many ulps of the reference ...
TINY = 1e-37  # ... + the float32 subnormal range (flushed to zero by some kernels)


def scale(dtype: str = "float32") -> float:
    """How much larger `dtype`'s rounding is than float32's (exactly 1.0 for float32)."""
    return EPS[dtype] / F32_EPS


def measured_in(dtype: str) -> str:
    """The dtype an op's own rounding is measured in for a program in `dtype`: its own, except
    float64, whose rounding cannot be measured against the float64 reference: float32, whose
    rounding of the same computation (cancellation included) scaled by `measured_scale` stands
    for float64's."""
    return "float32" if dtype == "float64" else dtype


def measured_scale(dtype: str) -> float:
    """The factor from the rounding measured in `measured_in(dtype)` to `dtype`'s (1 but for float64)."""
    return EPS[dtype] / EPS[measured_in(dtype)]


def tiny(dtype: str = "float32") -> float:
    """The absolute floor of `dtype`: TINY for float32, the smallest normal value otherwise."""
    return TINY if dtype == "float32" else DTYPE_TINY[dtype]


def accumulation_noise(extent: int, dtype: str = "float32") -> float:
    """Relative size (to the sum of |terms|) of the rounding of a sum of `extent` terms in `dtype`."""
    return F32_EPS * scale(dtype) * math.sqrt(max(extent, 1))


def screen(t: float, b: float, dtype: str = "float32") -> bool:
    """Whether two results in `dtype` agree without arbitration: equal non-finite values, or
    within SCREEN (in `dtype`'s ulps) of the larger magnitude of the two, plus the floor (below
    tiny: as much as the larger magnitude, what flushing a subnormal loses)."""
    if not (math.isfinite(t) and math.isfinite(b)):
        return t == b or (math.isnan(t) and math.isnan(b))
    return abs(t - b) <= SCREEN * scale(dtype) * max(abs(t), abs(b)) + floor(max(abs(t), abs(b)), 0.0, dtype)


def screen_failures(ts: Sequence[float], bs: Sequence[float], dtype: str = "float32") -> list[int]:
    """The indices j at which `screen(ts[j], bs[j], dtype)` fails: the same test, with its
    finite case inline (comparisons check hundreds of elements a program); an element that is
    not finite, or not within that bound, is decided by `screen` itself."""
    k, tny, dn = SCREEN * scale(dtype), tiny(dtype), DENORM_MIN[dtype]
    return [j for j, (t, b) in enumerate(zip(ts, bs))
            if not ((d := abs(t - b)) <= k * (m := max(abs(t), abs(b))) + min(tny, m + dn) and d != math.inf)
            and not screen(t, b, dtype)]


TERMS_ULPS = 4.0  # gradients: this many ulps of the sum of |terms| (noise.magnitude_run)
# Declared terms of an elementwise op (its `grad_terms` in the catalog: formulas that cancel,
# such as tanh's g (1 - y**2) or sigmoid's g y (1 - y) computed from the rounded output y)
# enter an element's budget once, as TERMS_ULPS ulps of them, and are not injected into the
# noise runs (whose deviation the budget multiplies by NOISE_FACTOR). One rounding of y makes
# at most eps g y**2 (tanh) or eps g |1 - 2y| y / 2 (sigmoid) of error; the terms allow
# TERMS_ULPS eps g (1 + y**2) and TERMS_ULPS eps g y (1 + y): about 8 and 16 times that near
# saturation, where the injected terms allowed ~100 times the real error (a derivative 1e-3 off
# in the tail passed). Reductions' declared terms (softmax, the losses, var) cancel in sums of
# an implementation-defined order and stay injected. A gradient read hands the values computed
# from it TERMS_ULPS / NOISE_FACTOR ulps of its terms as noise (noise.read_errors), so that they
# get about the read's own allowance.


def budget(noise: float, reference: float, terms: float = 0.0, dtype: str = "float32") -> float:
    """The absolute error a result in `dtype` of this element may have against the float64 one:
    from its measured noise, its own magnitude and (gradients) the magnitude of the terms it
    sums, which may cancel."""
    eps = F32_EPS * scale(dtype)
    return NOISE_FACTOR * noise + FLOOR_ULPS * eps * abs(reference) + TERMS_ULPS * eps * terms + floor(
        reference, terms, dtype)


def floor(reference: float, terms: float = 0.0, dtype: str = "float32") -> float:
    """The absolute floor of an element's budget: results below `tiny` may be subnormal or
    flushed to zero, which loses at most the size of the element or of the terms it sums (and
    one subnormal spacing), never the whole range below tiny: a float16 gradient of 1e-5 may
    not flip its sign under a floor of 6.1e-5."""
    return min(tiny(dtype), max(abs(reference), terms) + DENORM_MIN[dtype])


def unfloored_budget(reference: float, dtype: str = "float32") -> float:
    """An element's budget at zero measured noise without the floor's allowance to lose its own
    size below tiny: its FLOOR_ULPS ulps and one subnormal spacing (twice what one rounding into
    the subnormal range makes). An element screened equal only through the floor whose error
    exceeds this was lost or quantised, not rounded (findings/deviation.py `floor_losses`)."""
    return FLOOR_ULPS * F32_EPS * scale(dtype) * abs(reference) + DENORM_MIN[dtype]
