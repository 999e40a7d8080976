"""Kinks, decided per element: a failing element is `ill-conditioned` only when a kink reaches it.

An op on the element's path has an input at or near a kink of its own (its catalog domain is
tagged "kink" and rejects the float64 input): the two frameworks may then pick different
subgradients or different sides of a jump. Whether that happened at *this* element is decided
by one-sided finite differences in float64 (finite_diff.py):

* a gradient of a leaf: the right and left differences of L = sum(root) with respect to that
  leaf element;
* a value: the element's value when every leaf moves a little left and right.

When the two sides agree, the kink does not reach the element and it is judged like any other
(a wrong result stays wrong). When they disagree, both results must lie between the one-sided
limits and the float64 result (within the element's budget) to be `ill-conditioned`; a result
outside what either side gives stays a finding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import torch

from difftest.divergences.states import ModuleState
from difftest.ops import tolerance as tol
from difftest.ops.catalog import CATALOG
from difftest.ops.domains import DTYPE_ATTR, KINK_GAP
from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import cast_to_own_dtype, dtype_of, value_dtypes
from difftest.oracle.base_states import forward_returns_input
from difftest.oracle.burn_conventions import burn_convention_gradient, burn_convention_terms, burn_convention_value
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.finite_diff import as_tensor, estimate_error, finite_difference, value_sides
from difftest.oracle.gradient_reads import placing_read
from difftest.oracle.rounded_kinks import gradient_sides, value_limits
from difftest.program.dtypes import EPS
from difftest.program.ir import (
    Apply,
    Backward,
    Cut,
    Grad,
    Leaf,
    OpCall,
    Param,
    Program,
    ProgramError,
    Statement,
    ancestors,
    depends_on,
    root_module,
)
from difftest.program.observation import Observation

BAND_EPS = 2.0  # a rounded kink's limits: this many of its dtype's epsilons away, relative


def _same_tensor(program: Program, by_id: dict[str, Statement], st: Statement | None,
                 modules: Mapping[str, ModuleState] | None) -> str | None:
    """The value `st` is in both frameworks, which return that very tensor for it (so report its
    gradient as that value's), or None: a cast to its own dtype, a module forward that returns
    its input (a dropout with p = 0 or in eval mode; known from the model's `modules`), and
    `autodiff(x)` of an autodiff leaf x."""
    if isinstance(st, OpCall):
        return cast_to_own_dtype(program, st)
    if isinstance(st, Apply) and modules is not None:
        handle = modules.get(st.module)
        return st.input if handle is not None and forward_returns_input(handle) else None
    if isinstance(st, Cut) and st.cut == "autodiff":
        source: Statement | None = st
        while isinstance(source, Cut) and source.cut == "autodiff":
            source = by_id.get(source.input)
        if isinstance(source, Leaf) and source.device == "autodiff":
            return source.id
    return None


def as_gradient(program: Program, m: Mismatch, modules: Mapping[str, ModuleState] | None = None) -> Mismatch:
    """A value read from a gradients handle (`g = grad(x; bw)`) is the gradient of x at bw: its
    mismatch, as that gradient's (so a kink between x and bw's root reaches it, and the
    one-sided differences are x's), else `m` itself. The gradient of a value both frameworks
    return as another tensor itself (`_same_tensor`; `modules`: the model's module handles) is
    that tensor's: judged as its."""
    by_id = program.by_id()
    st = by_id.get(m.statement or "")
    if m.kind == "value" and isinstance(st, Grad):
        m, st = replace(m, kind="grad", statement=st.of, backward=st.grads), by_id.get(st.of)
    return replace(m, statement=itself(program, by_id, m.statement or "", modules)) if m.kind == "grad" else m


def itself(program: Program, by_id: dict[str, Statement], ident: str,
            modules: Mapping[str, ModuleState] | None) -> str:
    """The value whose tensor `ident` is in both frameworks (`_same_tensor`, followed)."""
    while (same := _same_tensor(program, by_id, by_id.get(ident), modules)) is not None:
        ident = same
    return ident


def _sources(program: Program, by_id: dict[str, Statement], ident: str) -> set[str]:
    """Where the gradient of `ident` enters the program: the value itself, or for a parameter
    read (`p = m.weight`) every forward of a module that derives from the same `module`
    statement (transforms and steps share its parameters), where that parameter is used, and
    every read of that parameter through any of those modules (`minimum(p1, p0)` of two reads
    of one weight is a tie at every element)."""
    st = by_id.get(ident)
    if not isinstance(st, Param):
        return {ident}
    root = root_module(program, st.module, by_id).id
    return {a.id for a in by_id.values()
            if (isinstance(a, Apply) or (isinstance(a, Param) and a.param == st.param))
            and root_module(program, a.module, by_id).id == root}


def _between(program: Program, by_id: dict[str, Statement], leaf: str, backward: str) -> set[str]:
    """The values between `leaf` (a value or a parameter read) and the root of `backward`: what
    its gradient goes through."""
    bw = by_id.get(backward)
    if not isinstance(bw, Backward):
        return set()
    sources = _sources(program, by_id, leaf)
    return {x for x in ancestors(by_id, bw.input) if sources & ancestors(by_id, x)}


def path_ops(program: Program, m: Mismatch,
             modules: Mapping[str, ModuleState] | None = None) -> list[tuple[int, OpCall]]:
    """The ops an element's computation goes through: a value's ancestors and, for each gradient
    read among them (`g = grad(x; bw)`), the ops between x and bw's root; for a gradient (or a
    value read from a gradients handle), the ops between the leaf and the backward root."""
    m = as_gradient(program, m, modules)
    by_id = program.by_id()
    if m.kind == "value":
        on_path = ancestors(by_id, m.statement or "")
        for x in list(on_path):
            st = by_id[x]
            if isinstance(st, Grad):
                on_path |= _between(program, by_id, itself(program, by_id, st.of, modules), st.grads)
    else:
        on_path = _between(program, by_id, m.statement or "", m.backward or "")
    return [(i, st) for i, st in enumerate(program.statements) if isinstance(st, OpCall) and st.id in on_path]


def near_kink(program: Program, ref: Observation, m: Mismatch,
              modules: Mapping[str, ModuleState] | None = None) -> str | None:
    """A description of the first op on the element's path whose float64 input lies at or near
    a kink of its own (its catalog domain is tagged "kink" and rejects the input), or None
    (`modules`: the model's module handles, for forwards that return their input)."""
    for i, st, xs, _ in kink_ops_near(program, ref, m, modules):
        if xs is not None:
            domain = CATALOG[st.op].domain
            return (f"{st.op} at statement {i} ({st.id}) has an input within {KINK_GAP} of its kink "
                    f"({domain.name}: {domain.reason})")
    return None


def kink_ops_near(program: Program, ref: Observation | None, m: Mismatch,
                  modules: Mapping[str, ModuleState] | None = None
                  ) -> Iterator[tuple[int, OpCall, list[torch.Tensor] | None, dict[str, Any]]]:
    """The ops on the element's path whose catalog domain is tagged "kink" and rejects their
    float64 input (at or near the kink), in program order: (index, op, its float64 inputs,
    its domain's attributes); the inputs None when `ref` lacks one (nothing known of them)."""
    dtypes = value_dtypes(program)
    for i, st in path_ops(program, m, modules):
        spec = CATALOG.get(st.op)
        if spec is None or "kink" not in spec.domain.tags:
            continue
        xs = input_values(ref, st)
        attrs = domain_attrs(st, dtypes, program.dtype)
        if xs is None or not spec.domain.predicate(xs, attrs):
            yield i, st, xs, attrs


def domain_attrs(st: OpCall, dtypes: Mapping[str, str], default: str) -> dict[str, Any]:
    """`st`'s attributes and, under DTYPE_ATTR, the dtype it runs in (its first input's), for its
    domain's predicate: a kink the op computes past a rounding in that dtype is wider."""
    dtype = dtypes.get(st.inputs[0], default) if st.inputs else default
    return {**st.attrs, DTYPE_ATTR: dtype}


def rounded_band(verdict: Verdict, m: Mismatch) -> float | None:
    """The relative step that crosses the rounding band of every op on the element's path whose
    input is near a kink in the dtype it runs in but not in float64 (rounded_kinks.py), or None
    when there is no such op: float64's one-sided differences cannot see those kinks."""
    program, ref = verdict.program, verdict.reference
    dtypes = value_dtypes(program)
    band: float | None = None
    for _, st in path_ops(program, m, verdict.prediction.torch.modules):
        spec = CATALOG.get(st.op)
        if spec is None or "kink" not in spec.domain.tags:
            continue
        attrs = domain_attrs(st, dtypes, program.dtype)
        xs = input_values(ref, st)
        if xs is None or attrs[DTYPE_ATTR] == "float64" or spec.domain.predicate(xs, attrs):
            continue
        if spec.domain.predicate(xs, {**attrs, DTYPE_ATTR: "float64"}):
            band = max(band or 0.0, BAND_EPS * EPS[attrs[DTYPE_ATTR]])
    return band


def input_values(obs: Observation | None, st: OpCall) -> list[torch.Tensor] | None:
    """The inputs of `st` as `obs` observed them, float64; None when one is missing."""
    out = []
    for x in st.inputs:
        v = obs.value(x) if obs is not None else None
        if v is None:
            return None
        out.append(as_tensor(v.value))
    return out


def _placed_from_read(program: Program, by_id: dict[str, Statement], ident: str,
                      element: int) -> tuple[Grad, int] | None:
    """The gradient read `ident` is placed from (gradient_reads.placing_read) and the read's
    element that `element` of `ident` is, found by running the ops in between on the read's
    element numbers; None otherwise, or when the element is a placed zero (tril)."""
    found = placing_read(by_id, ident)
    if found is None:
        return None
    read, chain = found
    try:
        shape = infer_shapes(program).get(read.id)
    except ProgramError:
        return None
    if shape is None:
        return None
    numbers = torch.arange(1, math.prod(shape) + 1, dtype=torch.float64).reshape(shape)
    try:
        for c in chain:
            if isinstance(c, OpCall):
                numbers = CATALOG[c.op].lower([numbers], c.attrs)
        number = int(numbers.reshape(-1)[element])
    except (IndexError, KeyError, RuntimeError, TypeError, ValueError):
        return None
    return (read, number - 1) if number >= 1 else None


def _sides(verdict: Verdict, m: Mismatch, element: int, r: float,
           budget: float) -> tuple[list[float], dict[str, Any]] | None:
    """The one-sided limits of the element that disagree (a kink reaches it), [] when they
    agree, or None when no one-sided check applies (a gradient of a parameter). A value placed
    from a gradient read (`narrow(grad(x; bw))`) is judged as that gradient's element: moving
    every leaf, as a value's check does, moves a cut's input and the cut together, so it never
    sees the kink autodiff sees there (minimum(v, without_autodiff(v)) ties whatever v is)."""
    program = verdict.program
    if m.kind == "value":
        placed = _placed_from_read(program, program.by_id(), m.statement or "", element)
        if placed is not None:
            read, element = placed
            m = replace(m, statement=read.id)
    m = as_gradient(program, m, verdict.prediction.torch.modules)
    if m.kind == "grad":
        if not isinstance(program.by_id().get(m.statement or ""), Leaf):
            return None
        fd = finite_difference(verdict, m.statement or "", m.backward or "", element)
        if fd is None:
            return None
        right, left = fd["one_sided"]
        evidence = {"one_sided": [right, left], "steps": fd["steps"]}
        agree = abs(right - left) <= 1e-3 * (abs(right) + abs(left)) + budget
        if math.isfinite(right) and math.isfinite(left) and agree:
            return [], evidence
        return [right, left], evidence
    limits: list[float] = []
    evidence = {"value_sides": []}
    families = [value_sides(program, m.statement or "", element)]
    by_id = program.by_id()
    if any(isinstance(by_id.get(x), Grad) for x in ancestors(by_id, m.statement or "")):
        # computed from a gradient read: a tie of two leaves' elements that moving them alike
        # keeps may decide where the gradient goes, so they are also moved apart
        families.append(value_sides(program, m.statement or "", element, spread=True))
    for sides in families:
        for left, right, step in sides:
            evidence["value_sides"].append({"step": step, "left": left, "right": right})
            dr, dl = right - r, r - left
            if not (math.isfinite(dr) and math.isfinite(dl)) or abs(dr - dl) > 1e-3 * (abs(dr) + abs(dl)) + budget:
                limits += [left, right]
    for sides in families:
        if not limits and _jumps(sides, r, budget):
            limits = [x for left, right, _ in sides for x in (left, right)]
    return limits, evidence


def _rounded_limits(verdict: Verdict, m: Mismatch, element: int, r: float, budget: float,
                    evidence: dict[str, Any]) -> list[float]:
    """The limits across a kink on the element's path that only its op's dtype rounding makes
    (rounded_band), when they differ: the float64 gradient (or value) with the leaf element (or
    every leaf) moved out of the band to each side; [] when there is no such kink or they agree.
    The limits are recorded in `evidence` under "rounded_sides"."""
    band = rounded_band(verdict, m)
    if band is None:
        return []
    program = verdict.program
    g = as_gradient(program, m, verdict.prediction.torch.modules)
    if g.kind == "grad":
        sides = gradient_sides(program, g.statement or "", g.backward or "", element, band)
    else:
        sides = value_limits(program, m.statement or "", element, band)
    if sides is None:
        return []
    evidence["rounded_sides"] = {"step": band, "left": sides[0], "right": sides[1]}
    left, right = sides
    # limits farther apart than the budget are a kink: a result at one of them may lie outside
    # the budget of the other (a bfloat16 quotient 8.98 rounded to 9: floor's -6 against -5)
    return [left, right] if abs(right - left) > budget else []


def _jumps(sides: list[tuple[float, float, float]], r: float, budget: float) -> bool:
    """The value jumps at the point: its one-sided differences do not shrink with the step (a
    continuous value's do, in proportion). A jump whose value at the point is the midpoint (a
    gradient read at a tie, which PyTorch splits in halves) has equal left and right
    differences, which the slope comparison alone takes for a smooth value."""
    steps = sorted(sides, key=lambda s: s[2])
    if len(steps) < 2:
        return False
    (small_l, small_r, h_small), (large_l, large_r, h_large) = steps[0], steps[-1]
    small = max(abs(small_r - r), abs(r - small_l))
    large = max(abs(large_r - r), abs(r - large_l))
    return small > budget and small >= 0.5 * large and h_small < h_large


def _reference_is_a_choice(evidence: dict[str, Any], r: float, budget: float) -> bool:
    """A gradient's agreeing one-sided differences and its float64 reference disagree: the
    reference is then no derivative of the program but a subgradient a tie picked."""
    sides = evidence.get("one_sided")
    if not sides or not all(math.isfinite(x) for x in (*sides, r)):
        return False
    slope = (sides[0] + sides[1]) / 2
    slack = budget + estimate_error([sides[0], sides[1], r])
    return bool(abs(r - slope) > 1e-3 * (abs(r) + abs(slope)) + slack)


def at_kink(verdict: Verdict, m: Mismatch, element: int, t: float, b: float, r: float, budget: float,
            kink: str, judged: tuple[str, str]) -> tuple[str, str, dict[str, Any]]:
    """The verdict of an element judged `judged` (burn- or torch-wrong) that has a kink on its
    path: `ill-conditioned` only when the kink reaches it and both results lie between its
    one-sided limits; otherwise `judged`, with the one-sided evidence in the reason."""
    sides = _sides(verdict, m, element, r, budget)
    if sides is None:
        return "ill-conditioned", f"{kink} (a parameter's gradient: no one-sided check)", {}
    limits, evidence = sides
    if not limits:
        limits = _rounded_limits(verdict, m, element, r, budget, evidence)
    if not limits and _reference_is_a_choice(evidence, r, budget):
        # the function is smooth along this element (a tie downstream flattens it: min(prelu(x), 0)
        # at x = 0 with another element at 0), yet the float64 reference is not that slope: it is
        # a subgradient the tie routed through the kink, and so may burn's be
        slope = evidence["one_sided"][0]
        return ("ill-conditioned", f"{kink}; its one-sided differences agree ({slope:.6g}) but the float64 "
                f"reference ({r:.6g}) is not that slope: a subgradient chosen at a tie", evidence)
    if not limits:
        # smooth along this element, yet an op on its path may sit exactly at a convention point
        # (a tie of min after clamp at its bound): burn's conventions composed may give another
        # subgradient than the slope both sides agree on
        # (the slope is then the float64 reference itself, not an estimate: each result must be
        # its framework's composition within the element's budget, no finite-difference slack)
        if math.isfinite(r):
            composed = _burn_composed(verdict, m, element, t, b, r, budget, (r - budget, r + budget))
            if composed is not None:
                return ("ill-conditioned", f"{kink}; its one-sided differences agree, but {composed}", evidence)
        return judged[0], f"{judged[1]}; {kink}, but its one-sided differences agree here", evidence
    finite = [x for x in (*limits, r) if math.isfinite(x)]
    if len(finite) <= 1:
        return "ill-conditioned", f"{kink}; its one-sided limits are not finite", evidence
    # the limits are finite-difference estimates: a result exactly at a limit (a subgradient's
    # end, a tie's whole gradient) may lie just outside the estimate, by its error, and by the
    # rounding of a result of that size in the element's dtype (the element's own budget is
    # sized by its reference, which may be the other limit: 0 where a tie sent nothing)
    dtype = dtype_of(verdict.program, m.statement or "")
    slack = budget + estimate_error(finite) + tol.budget(0.0, max(abs(x) for x in finite), 0.0, dtype)
    lo, hi = min(finite) - slack, max(finite) + slack
    if lo <= b <= hi and lo <= t <= hi:
        across = " across its op's rounding in its dtype" if "rounded_sides" in evidence else ""
        return ("ill-conditioned", f"{kink}; its one-sided limits{across} here differ ({min(finite):.6g} .. "
                f"{max(finite):.6g}) and both results lie between them", evidence)
    composed = _burn_composed(verdict, m, element, t, b, r, budget, (lo, hi))
    if composed is not None:
        return ("ill-conditioned", f"{kink}; a result lies outside its one-sided limits ({min(finite):.6g} .. "
                f"{max(finite):.6g}), but {composed}", evidence)
    return (judged[0], f"{judged[1]}; {kink}, and a result lies outside its one-sided limits "
            f"({min(finite):.6g} .. {max(finite):.6g})", evidence)


def _reads_gradient(by_id: dict[str, Statement], ident: str) -> bool:
    return any(isinstance(by_id.get(x), Grad) for x in ancestors(by_id, ident))


def _burn_composed(verdict: Verdict, m: Mismatch, element: int, t: float, b: float, r: float, budget: float,
                   hull: tuple[float, float]) -> str | None:
    """Why a result outside the one-sided limits is still no finding, or None: ops exactly at
    declared convention points compose. Two non-differentiable points at once (a tie routing the
    gradient into a kink) give each framework's composed conventions results the hull of the
    program's one-sided limits need not hold: PyTorch's is its float64 reference r, burn's the
    reference with burn's convention at each such op (burn_conventions.py). Each result must be
    between the limits or its own framework's composition; anything else stays a finding."""
    g = as_gradient(verdict.program, m, verdict.prediction.torch.modules)
    by_id = verdict.program.by_id()
    if g.kind == "value" and g.statement is not None and _reads_gradient(by_id, g.statement):
        # a value computed from a gradient read (sum_dim of grad(x; bw)): burn's conventions on
        # the read's backward give the value the same run computes from it
        alt = burn_convention_value(verdict.program, g.statement, element)
        depends = depends_on(by_id, g.statement)
    elif g.kind == "grad" and isinstance(by_id.get(g.statement or ""), Leaf):
        alt = burn_convention_gradient(verdict.program, g.statement or "", g.backward or "", element)
        depends = {st.id for _, st in path_ops(verdict.program, m, verdict.prediction.torch.modules)}
    else:
        return None
    if alt is None:
        return None
    rb, used = alt
    on_path = depends & set(used)
    lo, hi = hull
    if not on_path or not math.isfinite(rb):
        return None
    if not (lo <= t <= hi or abs(t - r) <= budget):
        return None
    if not (lo <= b <= hi or abs(b - rb) <= budget):
        if g.kind != "grad":
            return None
        # burn's composition sums its own terms (PyTorch's convention may send none: clamp at
        # its bound), whose rounding the budget measured on PyTorch's path does not hold
        dtype = dtype_of(verdict.program, m.statement or "")
        terms = burn_convention_terms(verdict.program, g.statement or "", g.backward or "", element)
        if not abs(b - rb) <= max(budget, tol.budget(0.0, rb, terms, dtype)):
            return None
    names = ", ".join(f"{used[x]} at {x}" for x in sorted(on_path))
    return (f"each is its framework's conventions composed: burn's {b:.6g} is the float64 reference with "
            f"burn's convention ({names}), {rb:.6g}")
