"""How far a passing one-op program's burn result is from the float64 result, against PyTorch's
float32 error: a fault inside the one-op budget that a longer path amplified shows as a deviation
far beyond PyTorch's own (localise.py names the most deviant op a suspect)."""

from __future__ import annotations

import math

from difftest.findings.error_classes import observed_tensor
from difftest.oracle.burn_conventions import burn_convention_gradient
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.dtypes import EPS

SUSPECT_RATIO = 30.0  # burn's error over PyTorch's float32 error, median over the dismissed elements
# how much a path may amplify a suspect's relative error into the finding's: a suspect whose own
# relative error is smaller than the finding's by more than this does not explain it
AMPLIFICATION = 1e4


def deviant(v: Verdict, kind: str) -> tuple[float, Mismatch] | None:
    """(ratio, mismatch) of the dismissed mismatch of kind `kind` (the finding's: a value or a
    gradient) of a passing one-op verdict where burn's distance from the float64 result most
    exceeds PyTorch's (at least SUSPECT_RATIO times, median over its elements), or None. A
    value's rounding does not name the op for a gradient finding: on Wgpu a gradient of 3 where
    PyTorch has 0 (a fused expand / permute backward) named remainder, whose value was a few
    ulps off and whose gradient was right. Ranked by `suspect_rank`."""
    best: tuple[float, Mismatch] | None = None
    for d in v.dismissals:
        if d.kind != kind or kind not in ("value", "grad"):
            continue
        if d.verdict == "ill-conditioned" and _as_declared(v, d):
            continue
        ref, t, b = observed_tensor(v.reference, d), observed_tensor(v.torch, d), observed_tensor(v.burn, d)
        if ref is None or t is None or b is None or not len(ref.data) == len(t.data) == len(b.data):
            continue
        ratios = []
        for e in d.elements or ((d.element,) if d.element is not None else ()):
            r, te, be = ref.data[e], t.data[e], b.data[e]
            if not all(map(math.isfinite, (r, te, be))):
                continue
            ratios.append(abs(be - r) / max(abs(te - r), abs(r) * 1e-15, 1e-300))
        if not ratios:
            continue
        ratio = sorted(ratios)[len(ratios) // 2]
        if ratio >= SUSPECT_RATIO and (best is None or suspect_rank(ratio, d) > suspect_rank(*best)):
            best = (ratio, d)
    return best


def _as_declared(v: Verdict, d: Mismatch) -> bool:
    """Whether burn's gradient at an ill-conditioned mismatch is what burn's declared conventions
    give, composed (burn_conventions.py: maximum of a tie to its first operand): burn then did what
    it documents at the tie or kink, which names no op."""
    b = observed_tensor(v.burn, d)
    elements = d.elements or ((d.element,) if d.element is not None else ())
    if d.kind != "grad" or b is None or not elements:
        return False
    tol = 8 * EPS.get(v.program.dtype, EPS["float32"])
    for e in elements:
        declared = burn_convention_gradient(v.program, d.statement or "", d.backward or "", e)
        if declared is None or not math.isclose(b.data[e], declared[0], rel_tol=tol, abs_tol=tol):
            return False
    return True


def relative_error(v: Verdict, d: Mismatch) -> float:
    """The median relative error of burn's result from the float64 one at `d`'s elements (0
    where it cannot be read)."""
    ref, b = observed_tensor(v.reference, d), observed_tensor(v.burn, d)
    if ref is None or b is None or len(ref.data) != len(b.data):
        return 0.0
    rel = sorted(abs(b.data[e] - ref.data[e]) / max(abs(ref.data[e]), 1e-300)
                 for e in d.elements or ((d.element,) if d.element is not None else ())
                 if math.isfinite(ref.data[e]) and math.isfinite(b.data[e]))
    return rel[len(rel) // 2] if rel else 0.0


def suspect_rank(ratio: float, d: Mismatch, size: float = 0.0, finding: float = 0.0) -> tuple[bool, bool, float]:
    """How strongly a dismissed mismatch suspects its op: one whose relative error (`size`) could
    grow into the finding's (`finding`, both from `relative_error`) through a path (within
    AMPLIFICATION) first; then an agreement (burn within the budget, far from the float64 result)
    before an ill-conditioned element (a kink or a tie, where burn's 1 and PyTorch's 0.5 of minimum
    are both subgradients: a fault there, a derivative scaled at a tie, shows only when no
    agreement suspects another op), then by the ratio. A float64 tanh a few ulps off does not
    explain a gradient wrong by a factor 2 that a tie beside it does."""
    return size * AMPLIFICATION >= finding, d.verdict == "agreement", ratio
