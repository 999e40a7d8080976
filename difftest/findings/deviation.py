"""How far a passing one-op program's burn result is from the float64 result, against PyTorch's
float32 error: a fault inside the one-op budget that a longer path amplified shows as a deviation
far beyond PyTorch's own (localise.py names the most deviant op a suspect)."""

from __future__ import annotations

import math

from difftest.findings.error_classes import observed_tensor
from difftest.oracle.compare import Mismatch, Verdict

SUSPECT_RATIO = 30.0  # burn's error over PyTorch's float32 error, median over the dismissed elements


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


def suspect_rank(ratio: float, d: Mismatch) -> tuple[bool, float]:
    """How strongly a dismissed mismatch suspects its op: an agreement (burn within the budget,
    far from the float64 result) before an ill-conditioned element (a kink or a tie, where burn's
    1 and PyTorch's 0.5 of minimum are both subgradients: a fault there, a derivative scaled at
    a tie, shows only when no agreement suspects another op), then by the ratio."""
    return d.verdict == "agreement", ratio
