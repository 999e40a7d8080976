"""Numeric arbitration: when PyTorch and burn disagree on a value or a gradient, a float64
PyTorch run decides who is wrong.

For each mismatching element let `t`, `b` be the float32 results and `r` the float64 one.
burn is judged against PyTorch's own float32 error on the same program:

* both within `floor` of the float64 result -> `agreement` (float32 noise);
* PyTorch more than SLACK times farther than burn (plus `floor`) -> `torch-wrong`;
* burn more than SLACK times farther than PyTorch (plus `floor`) -> `burn-wrong`;
* otherwise both are off by comparable amounts: the input is ill-conditioned -> `ill-conditioned`.

For gradients, a float64 central difference of `sum(root)` along a random direction also
runs; when the one-sided slopes at the input disagree (a kink in the neighbourhood) the
mismatch is `ill-conditioned`, recorded with its evidence, not a finding.

`floor` is the budget of tolerance.py applied to the float64 value, so a tiny absolute
difference never counts as wrong.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, replace

from .compare import Mismatch, Verdict
from .ir import Backward, Leaf, Program, Statement
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


def classify(t: float, b: float, r: float, rel: float, extra: float = 0.0) -> str:
    if any(math.isnan(x) or math.isinf(x) for x in (t, b, r)):
        if math.isnan(b) and not math.isnan(t):
            return "burn-wrong"
        return "ill-conditioned"
    floor = 1e-6 + rel * abs(r) + extra
    eb, et = abs(b - r), abs(t - r)
    if eb <= floor and et <= floor:
        return "agreement"
    if et > SLACK * eb + floor:
        return "torch-wrong"
    if eb > SLACK * et + floor:
        return "burn-wrong"
    return "ill-conditioned"  # both far from float64 by comparable amounts


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
        kind = classify(t, b, r, m.rel, m.floor)
        evidence: dict[str, object] = {
            "torch": t, "burn": b, "float64": r, "burn_error": abs(b - r), "torch_error": abs(t - r),
        }
        detail = f"{m.detail}; float64 reference[{m.element}]={r!r}"
        if m.kind == "grad":
            fd = finite_difference(verdict, m)
            if fd is not None:
                evidence["finite_difference"] = {
                    "steps": list(FD_STEPS), "estimates": list(fd.fd), "torch_dot_v": fd.torch,
                    "burn_dot_v": fd.burn, "smooth": fd.smooth, "direction_seed": fd.direction_seed,
                }
                detail += f"; central difference along v: {fd.fd[-1]!r} (torch {fd.torch!r}, burn {fd.burn!r})"
                if not fd.smooth:
                    kind = "ill-conditioned"
                    detail += "; not smooth near the input (kink): not a finding"
                elif kind == "burn-wrong" and fd.verdict() == "agreement":
                    kind = "agreement"
        numeric[k] = replace(m, verdict=kind, detail=detail, evidence=evidence)


# ---------------------------------------------------------------------- finite differences

FD_STEPS = (1e-4, 1e-5)


@dataclass(frozen=True)
class FDCheck:
    """Central differences of L = sum(root) along a random direction v, in float64."""

    direction_seed: int
    fd: tuple[float, ...]  # one estimate per step in FD_STEPS
    torch: float  # torch's gradient . v
    burn: float  # burn's gradient . v
    smooth: bool  # the estimates agree across steps (no kink in the neighbourhood)

    def verdict(self) -> str:
        if not self.smooth:
            return "ill-conditioned"
        ref = self.fd[-1]
        scale = max(abs(ref), abs(self.torch), 1e-6)
        eb, et = abs(self.burn - ref), abs(self.torch - ref)
        if eb <= 1e-4 * scale + SLACK * et:
            return "agreement"
        return "burn-wrong" if eb > SLACK * et else "torch-wrong"


def _loss(program: Program, root: str) -> float:
    """L = sum(root) in float64 (the backward seeds the root with ones)."""
    v = run_torch(program, "float64").value(root)
    return math.fsum(v.value.data) if v else math.nan


def finite_difference(verdict: Verdict, m: Mismatch) -> FDCheck | None:
    """FD check for a gradient mismatch on a leaf; None when it does not apply."""
    program = verdict.program
    by_id = program.by_id()
    leaf = by_id.get(m.statement or "")
    bw = by_id.get(m.backward or "")
    if not isinstance(leaf, Leaf) or not isinstance(bw, Backward):
        return None
    tg = _grad(verdict.torch, m.backward, leaf.id)
    bg = _grad(verdict.burn, m.backward, leaf.id)
    if tg is None or bg is None:
        return None
    seed = zlib.crc32(f"{leaf.id}:{len(program)}".encode())
    rng = random.Random(seed)
    v = [rng.gauss(0.0, 1.0) for _ in leaf.data]
    scale = max([abs(x) for x in leaf.data] + [1.0])
    # the program up to the backward: later statements do not change L
    cut = program.statements.index(bw)
    prefix = program.statements[:cut]
    estimates = []
    one_sided: tuple[float, float] = (math.nan, math.nan)
    l0 = _loss(_with_leaf(prefix, leaf, leaf.data), bw.input)
    for h in FD_STEPS:
        step = h * scale
        plus = tuple(x + step * d for x, d in zip(leaf.data, v))
        minus = tuple(x - step * d for x, d in zip(leaf.data, v))
        lp = _loss(_with_leaf(prefix, leaf, plus), bw.input)
        lm = _loss(_with_leaf(prefix, leaf, minus), bw.input)
        estimates.append((lp - lm) / (2 * step))
        one_sided = ((lp - l0) / step, (l0 - lm) / step)

    def near(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-3 * (abs(a) + abs(b)) + 1e-6

    # smooth: central estimates agree across steps, and the one-sided slopes agree with each
    # other (a kink at the input has different left and right slopes)
    values = [*estimates, *one_sided]
    smooth = all(math.isfinite(e) for e in values) and near(estimates[0], estimates[1]) and near(*one_sided)

    def dot(g: TensorObs) -> float:
        return math.fsum(a * b for a, b in zip(g.data, v))

    return FDCheck(seed, tuple(estimates), dot(tg), dot(bg), smooth)


def _grad(obs: Observation, backward: str | None, ident: str) -> TensorObs | None:
    for b in obs.backwards:
        if b.id == backward:
            return b.grads.get(ident)
    return None


def _with_leaf(statements: tuple[Statement, ...], leaf: Leaf, data: tuple[float, ...]) -> Program:
    # float64 data on purpose: the reference run never narrows to float32
    return Program(tuple(replace(s, data=data) if s is leaf else s for s in statements))


def max_relative_error(verdict: Verdict) -> float:
    """Largest |burn - torch| / max(|burn|, |torch|, 1) over values and gradients, for
    Hypothesis `target()` when hunting for numeric trouble."""
    worst = 0.0

    def pairs(a: TensorObs, b: TensorObs) -> None:
        nonlocal worst
        for x, y in zip(a.data, b.data):
            if math.isfinite(x) and math.isfinite(y):
                worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1.0))

    tvals = {v.id: v.value for v in verdict.torch.values}
    for v in verdict.burn.values:
        if v.id in tvals and tvals[v.id].shape == v.value.shape:
            pairs(tvals[v.id], v.value)
    for tb, bb in zip(verdict.torch.backwards, verdict.burn.backwards):
        for k, g in bb.grads.items():
            t = tb.grads.get(k)
            if g is not None and t is not None and t.shape == g.shape:
                pairs(t, g)
    return worst
