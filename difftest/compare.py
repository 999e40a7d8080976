"""Comparison: observations of both frameworks against each other and the model's prediction.

Flags, gradient presence, shapes and outcomes are compared exactly against the prediction.
Values and gradients are compared between the frameworks with the budgets of tolerance.py;
a numeric mismatch is then arbitrated by a float64 PyTorch run (`numerics.arbitrate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import tolerance as tol
from .catalog import CATALOG
from .ir import Apply, Backward, Cut, Leaf, Module, OpCall, Param, Program, Shape, Transform
from .model import Prediction
from .observation import Observation, TensorObs
from .states import BurnState, TorchState


@dataclass(frozen=True)
class Mismatch:
    kind: str  # outcome | crash | timeout | invalid | shape | flags | grad-presence | value | grad | stale-rule
    statement: str | None
    index: int | None
    framework: str | None
    expected: Any
    observed: Any
    detail: str = ""
    verdict: str = ""  # numeric verdict after arbitration: burn-wrong | torch-wrong | ill-conditioned | agreement
    element: int | None = None  # numeric mismatches: flat index of the first failing element
    pair: tuple[float, float] | None = None  # (torch, burn) at that element
    rel: float = 0.0  # the relative budget that was exceeded
    floor: float = 0.0  # extra absolute allowance (gradients: cancellation among their terms)
    backward: str | None = None  # grad mismatches: which backward
    evidence: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        where = f"statement {self.index} ({self.statement})" if self.statement else "program"
        fw = f" [{self.framework}]" if self.framework else ""
        v = f" -> {self.verdict}" if self.verdict else ""
        return f"{self.kind}{fw} at {where}: expected {self.expected}, observed {self.observed}{v}" + (
            f"\n      {self.detail}" if self.detail else ""
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "statement": self.statement,
            "index": self.index,
            "framework": self.framework,
            "expected": _plain(self.expected),
            "observed": _plain(self.observed),
            "detail": self.detail,
            "verdict": self.verdict,
            "element": self.element,
            "pair": _plain(list(self.pair)) if self.pair else None,
            "rel": self.rel,
            "backward": self.backward,
            "evidence": _plain(self.evidence),
        }


def _plain(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


@dataclass
class Verdict:
    program: Program
    prediction: Prediction
    torch: Observation
    burn: Observation
    mismatches: list[Mismatch] = field(default_factory=list)
    reference: Observation | None = None  # float64 PyTorch, when arbitration ran

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def findings(self) -> list[Mismatch]:
        """Mismatches that are findings (numeric agreement after arbitration is not)."""
        return [m for m in self.mismatches if m.verdict not in ("agreement", "ill-conditioned")]

    @property
    def kind(self) -> str:
        f = self.findings
        if not f:
            return "pass"
        first = f[0]
        return first.verdict or first.kind

    def report(self) -> str:
        from .render import program_text  # local: render imports compare

        lines = [f"verdict: {self.kind}"]
        for m in self.mismatches:
            lines.append("  - " + m.line())
        fired = self.prediction.rules_fired
        lines.append("rules fired: " + (", ".join(fired) if fired else "none"))
        lines.append("program:")
        lines.extend("  " + line for line in program_text(self.program).splitlines())
        return "\n".join(lines)


# ---------------------------------------------------------------------- budgets

def _roots(program: Program) -> dict[str, Module]:
    """Module handle -> the module statement it derives from."""
    roots: dict[str, Module] = {}
    for st in program.statements:
        if isinstance(st, Module):
            roots[st.id] = st
        elif isinstance(st, Transform):
            roots[st.id] = roots[st.input]
    return roots


def value_budgets(program: Program, shapes: dict[str, Shape]) -> dict[str, float]:
    budgets: dict[str, float] = {}
    roots = _roots(program)
    for st in program.statements:
        if isinstance(st, (Leaf, Param)):
            budgets[st.id] = 0.0
        elif isinstance(st, Apply):
            m = roots[st.module]
            if m.module == "linear":  # a dot product over `in`, then the bias: like matmul
                budgets[st.id] = tol.op_budget(tol.ACCUMULATE, [budgets[st.input]], m.in_features + 1)
            else:  # compared only where it returns its input (or p = 1: zeros)
                budgets[st.id] = budgets[st.input]
        elif isinstance(st, OpCall):
            spec = CATALOG[st.op]
            ins = [shapes[x] for x in st.inputs]
            extent = spec.reduced_extent(ins, st.attrs)
            budgets[st.id] = tol.op_budget(spec.tolerance, [budgets[x] for x in st.inputs], extent)
        elif isinstance(st, Cut):
            budgets[st.id] = budgets[st.input]
    return budgets


def input_scale(program: Program, obs: Observation) -> dict[str, float]:
    """Largest magnitude among a value's inputs (for cancellation-aware absolute error)."""
    mags: dict[str, float] = {}
    scale: dict[str, float] = {}
    for v in obs.values:
        finite = [abs(x) for x in v.value.data if math.isfinite(x)]
        mags[v.id] = max(finite, default=0.0)
    roots = _roots(program)
    for st in program.statements:
        if isinstance(st, Apply):
            m = roots[st.module]
            params = [*(m.weight.data if m.weight else ()), *(m.bias.data if m.bias else ())]
            finite = [abs(x) for x in params if math.isfinite(x)]
            scale[st.id] = max([mags.get(st.input, 0.0), scale.get(st.input, 0.0), *finite])
        elif isinstance(st, Param):
            scale[st.id] = 0.0
        elif isinstance(st, OpCall):
            scale[st.id] = max([mags.get(x, 0.0) for x in st.inputs] + [scale.get(x, 0.0) for x in st.inputs])
        elif isinstance(st, Cut):
            scale[st.id] = scale.get(st.input, 0.0)
        elif isinstance(st, Leaf):
            scale[st.id] = 0.0
    return scale


def close(a: float, b: float, rel: float, scale: float, floor: float = 0.0) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol.ATOL + floor + rel * max(abs(a), abs(b), scale)


def worst(
    x: TensorObs, y: TensorObs, rel: float, scale: float, floor: float = 0.0
) -> tuple[int, float, float] | None:
    """First failing element (index, x, y), or None when all close."""
    for i, (a, b) in enumerate(zip(x.data, y.data)):
        if not close(a, b, rel, scale, floor):
            return i, a, b
    return None


def magnitude(*tensors: TensorObs | None) -> float:
    return max((abs(v) for t in tensors if t is not None for v in t.data if math.isfinite(v)), default=0.0)


# ---------------------------------------------------------------------- comparison

Arbiter = Callable[[Verdict, list[Mismatch]], None]


def compare(
    program: Program,
    shapes: dict[str, Shape],
    prediction: Prediction,
    torch_obs: Observation,
    burn_obs: Observation,
    arbiter: Arbiter | None = None,
) -> Verdict:
    v = Verdict(program, prediction, torch_obs, burn_obs)
    out = v.mismatches
    for obs in (torch_obs, burn_obs):
        _outcome(program, prediction, obs, out)
        _flags_and_shapes(program, shapes, prediction, obs, out)
        _grad_presence(prediction, obs, out)
    numeric: list[Mismatch] = []
    _values(program, shapes, torch_obs, burn_obs, numeric, prediction.nondet, prediction.incomparable_grads)
    if numeric and arbiter is not None:
        arbiter(v, numeric)
    out.extend(numeric)
    return v


def _outcome(program: Program, pred: Prediction, obs: Observation, out: list[Mismatch]) -> None:
    fw = obs.framework
    p = pred.of(fw)
    err = obs.error
    if err is not None and err.kind in ("crash", "timeout"):
        out.append(Mismatch(err.kind, None, None, fw, "an answer", err.kind, err.message[:2000]))
        return
    if err is not None and err.kind.startswith("invalid"):
        out.append(Mismatch("invalid", err.statement, err.index, fw, "a valid program", err.kind, err.message))
        return
    expected = p.failure
    if expected is None and err is None:
        return
    if expected is not None and err is not None and expected[0] == err.index:
        return
    firings = [f for f in pred.firings if f.framework == fw and expected and f.index == expected[0]]
    if expected is not None and err is None and firings:
        out.append(Mismatch("stale-rule", expected[1], expected[0], fw, f"{expected[2].kind} ({expected[2].reason})",
                            "no error", f"rule(s) {', '.join(f.rule for f in firings)} predicted a failure"))
        return
    exp_txt = f"{expected[2].kind} at statement {expected[0]} ({expected[2].reason})" if expected else "no error"
    obs_txt = f"{err.kind} at statement {err.index}" if err else "no error"
    idx = err.index if err else (expected[0] if expected else None)
    stmt = err.statement if err else (expected[1] if expected else None)
    out.append(Mismatch("outcome", stmt, idx, fw, exp_txt, obs_txt, err.message[:2000] if err else ""))


def _flags_and_shapes(
    program: Program, shapes: dict[str, Shape], pred: Prediction, obs: Observation, out: list[Mismatch]
) -> None:
    fw = obs.framework
    p = pred.of(fw)
    index = {st.id: i for i, st in enumerate(program.statements)}
    for val in obs.values:
        i = index.get(val.id)
        if tuple(val.value.shape) != tuple(shapes[val.id]):
            out.append(Mismatch("shape", val.id, i, fw, list(shapes[val.id]), list(val.value.shape)))
        state = p.states.get(val.id)
        if state is None:
            continue
        expected = state.flags()
        if val.flags == expected:
            continue
        firings = [f for f in pred.firings if f.framework == fw and f.statement == val.id]
        base = p.base_states.get(val.id)
        if firings and isinstance(base, (TorchState, BurnState)) and base.flags() == val.flags:
            out.append(Mismatch("stale-rule", val.id, i, fw, expected, val.flags,
                                f"rule(s) {', '.join(f.rule for f in firings)} no longer match: "
                                "the observation equals the base prediction"))
        else:
            fired = ", ".join(f.rule for f in firings) or "none"
            out.append(Mismatch("flags", val.id, i, fw, expected, val.flags, f"rules fired here: {fired}"))


def _grad_presence(pred: Prediction, obs: Observation, out: list[Mismatch]) -> None:
    fw = obs.framework
    p = pred.of(fw)
    for bw in obs.backwards:
        expected = p.grads.get(bw.id)
        if expected is None:
            continue
        for ident, g in bw.grads.items():
            want = expected.get(ident, False)
            if want != (g is not None):
                firings = [f.rule for f in pred.firings if f.framework == fw and f.statement == ident]
                out.append(Mismatch("grad-presence", ident, None, fw,
                                    "a gradient" if want else "no gradient",
                                    "a gradient" if g is not None else "no gradient",
                                    f"at backward {bw.id}; rules fired on {ident}: {', '.join(firings) or 'none'}"))


def _values(
    program: Program,
    shapes: dict[str, Shape],
    t: Observation,
    b: Observation,
    out: list[Mismatch],
    nondet: set[str] | frozenset[str] = frozenset(),
    incomparable_grads: dict[str, set[str]] | None = None,
) -> None:
    """Values and gradients between the frameworks; `nondet` values (random dropout masks and
    what is computed from them) are skipped, and so is every gradient of a backward whose
    root is one of them, and `incomparable_grads[backward]` (gradients the frameworks route
    through different statements, by declared rules). Flags and gradient presence are compared
    regardless."""
    merged = incomparable_grads or {}
    budgets = value_budgets(program, shapes)
    scale = input_scale(program, t)
    index = {st.id: i for i, st in enumerate(program.statements)}
    backward_roots = {st.id: st.input for st in program.statements if isinstance(st, Backward)}
    tvals = {v.id: v for v in t.values}
    for bv in b.values:
        tv = tvals.get(bv.id)
        if tv is None or tv.value.shape != bv.value.shape or bv.id in nondet:
            continue
        rel = tol.allowed(budgets.get(bv.id, 0.0))
        bad = worst(tv.value, bv.value, rel, scale.get(bv.id, 0.0))
        if bad is not None:
            j, x, y = bad
            out.append(Mismatch("value", bv.id, index[bv.id], None, f"torch[{j}]={x!r}", f"burn[{j}]={y!r}",
                                f"allowed rel {rel:.3g} (budget composed along the path)",
                                element=j, pair=(x, y), rel=rel))
    gbudget = tol.grad_budget(list(budgets.values()))
    # a gradient is a sum of products of local derivatives and forward values: its float32 error
    # scales with the size of those terms, not of the (possibly cancelled) result
    forward = magnitude(*(v.value for v in t.values))
    tb = {bw.id: bw for bw in t.backwards}
    for bbw in b.backwards:
        tbw = tb.get(bbw.id)
        if tbw is None or backward_roots.get(bbw.id) in nondet:
            continue
        for ident, bg in bbw.grads.items():
            tg = tbw.grads.get(ident)
            if bg is None or tg is None or bg.shape != tg.shape or ident in merged.get(bbw.id, ()):
                continue
            gfloor = tol.cancellation_floor(max(forward, magnitude(*tbw.grads.values())))
            bad = worst(tg, bg, gbudget, 0.0, gfloor)
            if bad is not None:
                j, x, y = bad
                out.append(Mismatch("grad", ident, index[ident], None, f"torch.grad[{j}]={x!r}",
                                    f"burn.grad[{j}]={y!r}", f"at backward {bbw.id}; allowed rel {gbudget:.3g}",
                                    element=j, pair=(x, y), rel=gbudget, backward=bbw.id,
                                    floor=gfloor))
