"""Error classes of a numeric finding: how the wrong numbers differ from the reference at the
failing elements (NaN / inf, zero, sign, or rounding / small / large by the relative error), the
class a localised fault's signature carries (findings/localise.py), and the size of the terms
that may cancel there (the arbiter's magnitude run), which triage scales its rounding checks by."""

from __future__ import annotations

import math

from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import InlineTensor, Module, Param, Program, Step
from difftest.program.observation import Observation, TensorObs

ROUNDING = 3e-6  # median relative errors below this are rounding (a float64 computation through f32)
LARGE = 3e-2  # ... from this on, large (a wrong formula); between the two, small (a wrong constant)
WRONG_NUMBER = ("sign", "large", "small", "zero")  # classes of a wrong number, as opposed to rounding, NaN, inf


def error_class(pairs: list[tuple[float, float]]) -> str:
    """The class of an error from (reference, observed) pairs at the failing elements: `nan` /
    `inf` (observed not finite where the reference is), `zero` (observed 0 where the reference
    is not, everywhere), `sign` (opposite signs, everywhere), else by the median relative error:
    `rounding` (< 3e-6), `small` (< 3e-2), `large`. Coarse on purpose: the same bug must give the
    same class on other data, and a wrong formula's error has no one size."""
    if not pairs:
        return "none"
    if any(math.isnan(b) and not math.isnan(r) for r, b in pairs):
        return "nan"
    if any(math.isinf(b) and math.isfinite(r) for r, b in pairs):
        return "inf"
    finite = [(r, b) for r, b in pairs if math.isfinite(r) and math.isfinite(b)]
    if not finite:
        return "non-finite"
    if all(b == 0.0 and r != 0.0 for r, b in finite):
        return "zero"
    if all(r * b < 0 for r, b in finite):
        return "sign"
    rel = sorted(abs(b - r) / abs(r) if r != 0 else math.inf for r, b in finite)
    mid = rel[len(rel) // 2]
    return "rounding" if mid < ROUNDING else "small" if mid < LARGE else "large"


def observed_tensor(obs: Observation | None, m: Mismatch) -> TensorObs | None:
    if obs is None or m.statement is None:
        return None
    if m.kind == "grad":
        return obs.grad(m.backward, m.statement)
    v = obs.value(m.statement)
    return v.value if v is not None else None


def mismatch_pairs(verdict: Verdict, m: Mismatch) -> list[tuple[float, float]]:
    """(reference, burn) at the mismatch's failing elements: the float64 run's value when it ran,
    else PyTorch's (for a torch-wrong verdict, (reference, torch))."""
    ref = observed_tensor(verdict.reference, m) or observed_tensor(verdict.torch, m)
    seen = observed_tensor(verdict.torch if m.verdict == "torch-wrong" else verdict.burn, m)
    if ref is None or seen is None or len(ref.data) != len(seen.data):
        return [m.pair[::-1]] if m.pair else []
    return [(ref.data[e], seen.data[e]) for e in failing_elements(m) if 0 <= e < len(ref.data)]


def mismatch_terms(verdict: Verdict, m: Mismatch) -> list[float]:
    """The size of the terms the arbiter measured at each element `mismatch_pairs` lists (the
    magnitude run's: what may cancel in the element's value or gradient); empty where the pairs
    are not per element or the arbiter did not list every one."""
    ref = observed_tensor(verdict.reference, m) or observed_tensor(verdict.torch, m)
    if ref is None:
        return []
    size = {int(e["element"]): float(e["terms"]) for e in (m.evidence or {}).get("elements", ())
            if isinstance(e, dict) and isinstance(e.get("terms"), (int, float))}
    elements = [e for e in failing_elements(m) if 0 <= e < len(ref.data)]
    return [size[e] for e in elements] if all(e in size for e in elements) else []


def failing_elements(m: Mismatch) -> tuple[int, ...]:
    elements = m.elements or ((m.element,) if m.element is not None else ())
    # the elements the arbiter judged wrong, where it listed them: the others failed only the
    # screen (a gradient of exactly 0 off by rounding would make any relative error "large")
    judged = {int(e["element"]) for e in (m.evidence or {}).get("elements", ())
              if isinstance(e, dict) and e.get("verdict") == m.verdict}
    return tuple(e for e in elements if e in judged) or elements


def mismatch_class(verdict: Verdict, m: Mismatch) -> str:
    if m.kind == "grad-presence":
        return f"{m.expected}->{m.observed}".replace(" ", "")
    if m.kind in ("value", "grad"):
        return error_class(mismatch_pairs(verdict, m))
    return m.kind


def step_terms(program: Program, m: Mismatch) -> list[float]:
    """For a finding at a parameter read right after an optimizer step of a module given inline
    (a step's one-op program): the size of the parameter before the step at each failing
    element, the terms an update cancels (a step that leaves w - lr * d near 0 from w near 0.4
    has an f32 error of 0.4's size, not of the result's); empty elsewhere."""
    table = program.by_id()
    read = table.get(m.statement or "")
    step = table.get(read.module) if isinstance(read, Param) else None
    module = table.get(step.module) if isinstance(step, Step) else None
    before = getattr(module, read.param, None) if isinstance(module, Module) and isinstance(read, Param) else None
    if not isinstance(before, InlineTensor):
        return []
    elements = failing_elements(m)
    if not elements or any(not 0 <= e < len(before.data) for e in elements):
        return []
    return [abs(float(before.data[e])) for e in elements]

