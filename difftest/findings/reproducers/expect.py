"""What a correct burn gives for a program, as the asserting burn reproducer checks it: from a
verdict of the program (its PyTorch run, its float64 reference where it was arbitrated, and the
model's prediction of burn's flags, gradient presence and failure).

* a value or gradient element PyTorch and burn agree on (or whose difference the oracle
  dismissed): PyTorch's result, within 64 ulps of it plus 8 ulps of the tensor's largest element,
  or twice the difference seen, whichever is larger: a burn that agreed keeps passing;
* an element the oracle judged burn-wrong: the float64 result, within the oracle's budget for
  it: the buggy burn fails, a burn within that budget passes;
* flags (is_autodiff, is_tracked, is_require_grad) and whether each gradient exists: burn's
  semantics as the model predicts them (declared divergences included);
* a statement where the model predicts that burn fails: the test expects a panic.

Values PyTorch does not compute alike (dropout masks, gradients routed differently by a declared
rule) carry no numeric expectation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from difftest.divergences.states import BurnState
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.dtypes import EPS, TINY
from difftest.program.observation import TensorObs

Check = tuple[tuple[float, ...], tuple[float, ...]]  # expected data, tolerance per element


@dataclass
class Expected:
    values: dict[str, Check] = field(default_factory=dict)
    flags: dict[str, tuple[bool, bool, bool]] = field(default_factory=dict)
    # (backward, value) -> the expected gradient, or None where burn has none
    grads: dict[tuple[str, str], Check | None] = field(default_factory=dict)
    panics: bool = False


def _wrong(m: Mismatch) -> dict[int, tuple[float, float]]:
    """The elements of a mismatch judged burn-wrong: element -> (float64 result, budget)."""
    out = {}
    for e in (m.evidence or {}).get("elements", []):
        if e.get("verdict") == "burn-wrong" and math.isfinite(e.get("budget", math.nan)):
            out[int(e["element"])] = (float(e["float64"]), float(e["budget"]))
    return out


def _check(t: TensorObs, b: TensorObs | None, dtype: str, wrong: dict[int, tuple[float, float]]) -> Check:
    eps = EPS.get(dtype, EPS["float32"])
    big = max((abs(x) for x in t.data if math.isfinite(x)), default=0.0)
    want, tol = [], []
    for j, x in enumerate(t.data):
        if j in wrong:
            want.append(wrong[j][0])
            tol.append(wrong[j][1])
            continue
        base = 64 * eps * abs(x) + 8 * eps * big + TINY.get(dtype, 0.0) if math.isfinite(x) else 0.0
        seen = b.data[j] if b is not None and j < len(b.data) else x
        gap = abs(seen - x) if math.isfinite(seen - x) else 0.0
        want.append(x)
        tol.append(max(base, 2 * gap))
    return tuple(want), tuple(tol)


def expected(verdict: Verdict) -> Expected:
    """The expectation of a checked program (see the module's docstring)."""
    program, pred = verdict.program, verdict.prediction
    dtype = program.dtype
    wrong_values = {m.statement: _wrong(m) for m in verdict.mismatches if m.kind == "value" and m.statement}
    wrong_grads = {(m.backward, m.statement): _wrong(m) for m in verdict.mismatches
                   if m.kind == "grad" and m.statement and m.backward}
    out = Expected(panics=pred.burn.failure is not None)
    for v in verdict.torch.values:
        state = pred.burn.states.get(v.id)
        if isinstance(state, BurnState):
            out.flags[v.id] = (state.is_autodiff, state.is_tracked, state.is_require_grad)
        if v.id in pred.nondet:
            continue
        b = verdict.burn.value(v.id)
        if b is not None and b.value.shape != v.value.shape:
            continue
        out.values[v.id] = _check(v.value, b.value if b else None, dtype, wrong_values.get(v.id, {}))
    burn_bws = {bw.id: bw for bw in verdict.burn.backwards}
    for bw in verdict.torch.backwards:
        if pred.burn.roots.get(bw.id) in pred.nondet:
            continue
        for ident, present in pred.burn.grads.get(bw.id, {}).items():
            if not present:
                out.grads[(bw.id, ident)] = None
                continue
            tg = bw.grads.get(ident)
            if tg is None or ident in pred.incomparable_grads.get(bw.id, set()):
                continue
            bg = burn_bws[bw.id].grads.get(ident) if bw.id in burn_bws else None
            if bg is not None and bg.shape != tg.shape:
                continue
            out.grads[(bw.id, ident)] = _check(tg, bg, dtype, wrong_grads.get((bw.id, ident), {}))
    return out
