"""Numeric arbitration: when PyTorch and burn disagree on a value or a gradient, a float64
PyTorch run decides who is wrong.

For each mismatching element let `t`, `b` be the float32 results and `r` the float64 one.
burn is judged against PyTorch's own float32 error on the same program:

* `|b - r| <= SLACK * |t - r| + floor`: burn is as accurate as PyTorch: the disagreement is
  float32 noise of an ill-conditioned computation -> `ill-conditioned` (when PyTorch's own error
  exceeds the budget) or `agreement`;
* otherwise, if `|t - r|` exceeds `|b - r|` by the same margin -> `torch-wrong`;
* otherwise -> `burn-wrong`.

`floor` is the budget of tolerance.py applied to the float64 value, so a tiny absolute
difference never counts as wrong.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .compare import Mismatch, Verdict
from .observation import Observation, TensorObs
from .torch_exec import run_torch

SLACK = 4.0


def _reference_tensor(ref: Observation, m: Mismatch) -> TensorObs | None:
    if m.kind == "value":
        v = ref.value(m.statement or "")
        return v.value if v else None
    for bw in ref.backwards:
        if bw.id == m.backward:
            return bw.grads.get(m.statement or "")
    return None


def classify(t: float, b: float, r: float, rel: float) -> str:
    if any(math.isnan(x) or math.isinf(x) for x in (t, b, r)):
        if math.isnan(b) and not math.isnan(t):
            return "burn-wrong"
        return "ill-conditioned"
    floor = 1e-6 + rel * abs(r)
    eb, et = abs(b - r), abs(t - r)
    if eb <= SLACK * et + floor:
        return "ill-conditioned" if et > floor else "agreement"
    if et > SLACK * eb + floor:
        return "torch-wrong"
    return "burn-wrong"


def arbitrate(verdict: Verdict, numeric: list[Mismatch]) -> None:
    """Run the program in float64 PyTorch and set each numeric mismatch's verdict in place."""
    ref = run_torch(verdict.program, "float64")
    verdict.reference = ref
    for k, m in enumerate(numeric):
        tensor = _reference_tensor(ref, m)
        if tensor is None or m.element is None or m.pair is None or m.element >= len(tensor.data):
            numeric[k] = replace(m, verdict="burn-wrong", detail=m.detail + "; no float64 reference")
            continue
        t, b = m.pair
        r = tensor.data[m.element]
        kind = classify(t, b, r, m.rel)
        numeric[k] = replace(
            m,
            verdict=kind,
            detail=f"{m.detail}; float64 reference[{m.element}]={r!r}",
            evidence={"torch": t, "burn": b, "float64": r, "burn_error": abs(b - r), "torch_error": abs(t - r)},
        )
