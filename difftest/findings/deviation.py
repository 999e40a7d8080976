"""How far a passing one-op program's burn result is from the float64 result, against PyTorch's
float32 error: a fault inside the one-op budget that a longer path amplified shows as a deviation
far beyond PyTorch's own (localise.py names the most deviant op a suspect). The deviations read
are the arbiter's dismissals and the elements the screen passed only through its floor, below
the dtype's smallest normal value (`floor_losses`): a result lost there is no dismissal, since
nothing was arbitrated."""

from __future__ import annotations

import math
from collections.abc import Iterator

from difftest.findings.error_classes import observed_tensor
from difftest.ops import tolerance as tol
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.burn_conventions import burn_convention_gradient
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.pytorch import run as run_torch
from difftest.program.dtypes import DENORM_MIN, EPS
from difftest.program.ir import Backward
from difftest.program.observation import TensorObs

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
    ulps off and whose gradient was right. A loss the screen's floor passed (`floor_losses`)
    competes as an agreement of its own. Ranked by `suspect_rank`."""
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
    for ratio, d in floor_losses(v, kind):
        if best is None or suspect_rank(ratio, d) > suspect_rank(*best):
            best = (ratio, d)
    return best


FLOOR_REASON = ("screened equal only through the floor below the smallest normal value; burn off the float64 "
                "result beyond the budget without that floor")


def floor_losses(v: Verdict, kind: str) -> list[tuple[float, Mismatch]]:
    """The elements of kind `kind` (a value or a gradient) of a passing one-op verdict that the
    screen passed only through its floor (tolerance.floor: below the dtype's smallest normal value
    an element may lose its own size, what flushing a subnormal loses), where burn's distance from
    the float64 result exceeds the budget without that floor (tolerance.unfloored_budget) and
    PyTorch's own error, counted as at least half a subnormal spacing (its result is rounded to the
    dtype), SUSPECT_RATIO times: lost or quantised, not rounded (a float16 backward that rounds an
    intermediate below the subnormal spacing and multiplies it back up gives 0 where PyTorch and
    float64 give 5e-5). Per tensor with such elements: (their median ratio, an agreement Mismatch
    listing them, with the arbiter's per-element evidence). The float64 run is the one the arbiter
    would make (set as `v.reference`), made only when an element's distance between burn and
    PyTorch already allows such an error; most verdicts have none."""
    if kind not in ("value", "grad") or not v.ok:
        return []
    candidates = [(ident, bw, t, b, dtype, js) for ident, bw, t, b, dtype in _compared(v, kind)
                  if (js := _floor_screened(t.data, b.data, dtype))]
    if not candidates:
        return []
    if v.reference is None:
        v.reference = run_torch(v.program, "float64")
    out: list[tuple[float, Mismatch]] = []
    index = {st.id: i for i, st in enumerate(v.program.statements)}
    for ident, bw, t, b, dtype, js in candidates:
        probe = Mismatch(kind, ident, None, None, None, None, backward=bw)
        ref = observed_tensor(v.reference, probe)
        if ref is None or len(ref.data) != len(b.data):
            continue
        lost: list[tuple[float, int, float]] = []
        for j in js:
            r, te, be = ref.data[j], t.data[j], b.data[j]
            if not math.isfinite(r) or abs(be - r) <= tol.unfloored_budget(r, dtype):
                continue
            ratio = abs(be - r) / max(abs(te - r), DENORM_MIN[dtype] / 2, abs(r) * 1e-15, 1e-300)
            if ratio >= SUSPECT_RATIO:
                lost.append((ratio, j, r))
        if not lost:
            continue
        ratio = sorted(x for x, _, _ in lost)[len(lost) // 2]
        worst = max(lost)[1]
        name = "grad" if kind == "grad" else ""
        at = f"{'.' + name if name else ''}[{worst}]"
        evidence = [{"element": j, "verdict": "agreement", "reason": FLOOR_REASON, "torch": t.data[j],
                     "burn": b.data[j], "float64": r, "budget": tol.unfloored_budget(r, dtype)} for _, j, r in lost]
        out.append((ratio, Mismatch(
            kind, ident, index.get(ident), None, f"torch{at}={t.data[worst]!r}", f"burn{at}={b.data[worst]!r}",
            f"{f'at backward {bw}; ' if bw else ''}{len(lost)} of {len(b.data)} element(s) {FLOOR_REASON}",
            "agreement", worst, (t.data[worst], b.data[worst]), bw,
            {"reason": FLOOR_REASON, "elements": evidence}, tuple(sorted(j for _, j, _ in lost)))))
    return out


def _compared(v: Verdict, kind: str) -> Iterator[tuple[str, str | None, TensorObs, TensorObs, str]]:
    """(id, backward, PyTorch's, burn's, dtype) of each tensor of kind `kind` that comparison
    screened element by element (compare._values: random values, the gradients of a random
    root and those the frameworks route differently are not)."""
    dtypes = value_dtypes(v.program)
    nondet = v.prediction.nondet
    if kind == "value":
        for bv in v.burn.values:
            tv = v.torch.value(bv.id)
            if tv is not None and tv.value.shape == bv.value.shape and bv.id not in nondet:
                yield bv.id, None, tv.value, bv.value, dtypes.get(bv.id, v.program.dtype)
        return
    roots = {st.id: st.input for st in v.program.statements if isinstance(st, Backward)}
    merged = v.prediction.incomparable_grads or {}
    for bbw in v.burn.backwards:
        if roots.get(bbw.id) in nondet:
            continue
        for ident, bg in bbw.grads.items():
            tg = v.torch.grad(bbw.id, ident)
            if bg is not None and tg is not None and bg.shape == tg.shape and ident not in merged.get(bbw.id, ()):
                yield ident, bbw.id, tg, bg, dtypes.get(ident, v.program.dtype)


def _floor_screened(ts: tuple[float, ...], bs: tuple[float, ...], dtype: str) -> list[int]:
    """The elements that pass the screen only through its floor (not without it), where burn and
    PyTorch differ by more than 14 subnormal spacings: a floor loss (`floor_losses`) lies at least
    15 (SUSPECT_RATIO times half of one, PyTorch's least counted error) from the float64 result,
    and PyTorch at most 1/SUSPECT_RATIO of that, so no element left out here could be one."""
    k, least = tol.SCREEN * tol.scale(dtype), (SUSPECT_RATIO / 2 - 1) * DENORM_MIN[dtype]
    return [j for j, (t, b) in enumerate(zip(ts, bs))
            if math.isfinite(t) and math.isfinite(b) and abs(t - b) > max(k * max(abs(t), abs(b)), least)
            and tol.screen(t, b, dtype)]


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
