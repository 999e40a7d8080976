"""Comparison: observations of both frameworks against each other and the model's prediction.

Flags, gradient presence, shapes and outcomes are compared exactly against the prediction.
Values and gradients are compared between the frameworks with the budgets of tolerance.py;
a numeric mismatch is then arbitrated by a float64 PyTorch run (`numerics.arbitrate`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from difftest.divergences.states import BurnState, TorchState
from difftest.ops import tolerance as tol
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.model import Prediction
from difftest.program.ir import Backward, Program, Shape, is_value
from difftest.program.observation import BackwardObs, ErrorObs, Observation, TensorObs
from difftest.program.recent import remembered
from difftest.program.text import program_text


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
    element: int | None = None  # numeric mismatches: the worst element (flat index)
    pair: tuple[float, float] | None = None  # (torch, burn) at that element
    backward: str | None = None  # grad mismatches: which backward
    evidence: dict[str, Any] = field(default_factory=dict)
    elements: tuple[int, ...] = ()  # numeric mismatches: every element that failed the screen

    def line(self) -> str:
        where = f"statement {self.index} ({self.statement})" if self.statement else "program"
        fw = f" [{self.framework}]" if self.framework else ""
        v = f" -> {self.verdict}" if self.verdict else ""
        at = self.evidence.get("location") if self.kind == "outcome" else None
        return f"{self.kind}{fw} at {where}: expected {self.expected}, observed {self.observed}{v}" + (
            f"\n      {self.detail}" if self.detail else "") + (f"\n      raised at {at}" if at else "")

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
            "elements": list(self.elements),
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


DISMISSED = ("agreement", "ill-conditioned")


def dismissal_reason(m: Mismatch) -> str:
    """`<verdict>: <reason>` with numbers and ids left out, for counting dismissals."""
    reason = str(m.evidence.get("reason", m.kind))
    if m.verdict == "ill-conditioned":
        reason = "near a kink of " + reason.split(" at statement", 1)[0]
    return f"{m.verdict}: {reason}"


@dataclass
class Verdict:
    program: Program
    prediction: Prediction
    torch: Observation
    burn: Observation
    mismatches: list[Mismatch] = field(default_factory=list)
    reference: Observation | None = None  # float64 PyTorch, when arbitration ran
    # values and gradients not compared numerically, by reason (compare._values)
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def findings(self) -> list[Mismatch]:
        """Mismatches that are findings (numeric agreement after arbitration is not)."""
        return [m for m in self.mismatches if m.verdict not in DISMISSED]

    @property
    def dismissals(self) -> list[Mismatch]:
        """Numeric mismatches dismissed by arbitration (each carries its evidence)."""
        return [m for m in self.mismatches if m.verdict in DISMISSED]

    @property
    def kind(self) -> str:
        f = self.findings
        if not f:
            return "pass"
        first = f[0]
        return first.verdict or first.kind

    def report(self) -> str:
        """The verdict, its mismatches, the rules fired and the program as plain text (with the
        per-statement table: difftest/findings/table.py `report`)."""
        lines = [f"verdict: {self.kind}"]
        for m in self.mismatches:
            lines.append("  - " + m.line())
        fired = self.prediction.rules_fired
        lines.append("rules fired: " + (", ".join(fired) if fired else "none"))
        lines.append("program:")
        lines.extend("  " + line for line in program_text(self.program).splitlines())
        return "\n".join(lines)


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
        _completeness(program, obs, out)
        _flags_and_shapes(program, shapes, prediction, obs, out)
        _grad_presence(prediction, obs, out)
        _dtypes(program, obs, out)
    numeric: list[Mismatch] = []
    _values(program, shapes, torch_obs, burn_obs, numeric, prediction.nondet, prediction.incomparable_grads,
            v.skipped)
    if numeric and arbiter is not None:
        arbiter(v, numeric)
    out.extend(numeric)
    return v


def screen_grads(prefix: Program, backward: Backward, torch_result: BackwardObs | ErrorObs, burn_bw: BackwardObs,
                 nondet: set[str] | frozenset[str] = frozenset(),
                 prediction: Prediction | None = None) -> list[Mismatch]:
    """The gradients burn reports for `backward`, run without error after the statements of
    `prefix` (a root probe, difftest/oracle/probe_run.py), before any arbitration. Without
    `prediction`, against PyTorch's report alone (`torch_result`: the backward, or how it
    failed): the same entries, a gradient in both or in neither. With the model's `prediction`
    for the probe's program (`prefix`, then `backward`), as `compare` checks them: PyTorch's
    outcome and each framework's gradient presence against the model, gradients the frameworks
    route differently left out. Then the entries complete, each gradient in its value's dtype,
    and the elements between the frameworks by the screen (none when the root is `nondet`).
    Every mismatch is returned undismissed: an empty list is a pass, anything else calls for a
    full check."""
    out: list[Mismatch] = []
    i = len(prefix.statements)
    torch_bw = torch_result if isinstance(torch_result, BackwardObs) else None
    torch = Observation("torch", backwards=() if torch_bw is None else (torch_bw,),
                        error=torch_result if isinstance(torch_result, ErrorObs) else None)
    burn = Observation("burn", backwards=(burn_bw,))
    if prediction is not None:
        program = prefix.extended(backward)
        _outcome(program, prediction, torch, out)
        for obs in (torch, burn):
            _grad_presence(prediction, obs, out)
    elif torch_bw is None:
        out.append(Mismatch("outcome", backward.id, i, "torch", "no error", str(torch.error)))
    else:
        for ident, b in burn_bw.grads.items():
            t = torch_bw.grads.get(ident)
            if (t is None) != (b is None):
                out.append(Mismatch("grad-presence", ident, None, None, "a gradient" if t else "no gradient",
                                    "a gradient" if b else "no gradient", f"at backward {burn_bw.id}"))
    defined = _sorted_values(prefix)
    for obs in (torch, burn):
        for bw in obs.backwards:
            if sorted(bw.grads) != defined:
                out.append(Mismatch("incomplete", bw.id, i, obs.framework, f"gradient entries for {defined}",
                                    f"entries for {sorted(bw.grads)}"))
        _dtypes(prefix, obs, out)
    if backward.input in nondet:
        return out
    for ident, b in burn_bw.grads.items():
        t = torch_bw.grads.get(ident) if torch_bw is not None else None
        if t is not None and b is not None and t.shape != b.shape:
            out.append(Mismatch("shape", ident, None, None, list(t.shape), list(b.shape), f"at backward {burn_bw.id}"))
    incomparable = prediction.incomparable_grads if prediction is not None else None
    _values(prefix, {}, torch, burn, out, nondet, incomparable)
    return out


def _outcome(program: Program, pred: Prediction, obs: Observation, out: list[Mismatch]) -> None:
    fw = obs.framework
    p = pred.of(fw)
    err = obs.error
    if err is not None and err.kind in ("crash", "timeout"):
        # a hang stopped in a burn function is signed by that function (signature.py)
        evidence = {"site": err.site, "stack": list(err.stack)} if err.site is not None else {}
        out.append(Mismatch(err.kind, None, None, fw, "an answer", err.kind, err.message[:2000], evidence=evidence))
        return
    if err is not None and err.kind.startswith("invalid"):
        out.append(Mismatch("invalid", err.statement, err.index, fw, "a valid program", err.kind, err.message))
        return
    expected = p.failure
    if expected is None and err is None:
        return
    if expected is not None and err is not None and expected[0] == err.index \
            and expected[2].matches(err.kind, err.message):
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
    # where the panic was raised: evidence, never part of the signature (a line moves between builds)
    where = {"location": err.location} if err is not None and err.location is not None else {}
    out.append(Mismatch("outcome", stmt, idx, fw, exp_txt, obs_txt, err.message[:2000] if err else "",
                        evidence=where))


def _flags_and_shapes(
    program: Program, shapes: dict[str, Shape], pred: Prediction, obs: Observation, out: list[Mismatch]
) -> None:
    fw = obs.framework
    p = pred.of(fw)
    index = _positions(program)
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
                                    f"at backward {bw.id}; rules fired on {ident}: {', '.join(firings) or 'none'}",
                                    backward=bw.id))


def _values(
    program: Program,
    shapes: dict[str, Shape],
    t: Observation,
    b: Observation,
    out: list[Mismatch],
    nondet: set[str] | frozenset[str] = frozenset(),
    incomparable_grads: dict[str, set[str]] | None = None,
    skipped: Counter[str] | None = None,
) -> None:
    """Values and gradients between the frameworks, element by element (tolerance.screen);
    `nondet` values (random dropout masks and what is computed from them) are skipped, and so
    is every gradient of a backward whose root is one of them, and `incomparable_grads[backward]`
    (gradients the frameworks route through different statements, by declared rules). Flags and
    gradient presence are compared regardless. Elements that fail the screen are judged by the
    arbiter (numerics.py), each on its own. `skipped` counts, by reason, the values and
    gradients not compared numerically."""
    skip: Counter[str] = skipped if skipped is not None else Counter()
    dtypes = value_dtypes(program)
    merged = incomparable_grads or {}
    index = _positions(program)
    backward_roots = _backward_roots(program)
    tvals = {v.id: v for v in t.values}
    for bv in b.values:
        tv = tvals.get(bv.id)
        if tv is None or tv.value.shape != bv.value.shape or bv.id in nondet:
            skip["value: " + ("only burn reached it" if tv is None else "random (dropout)" if bv.id in nondet
                              else "shapes differ")] += 1
            continue
        m = _numeric("value", bv.id, index.get(bv.id), tv.value, bv.value, None, dtypes.get(bv.id, program.dtype))
        if m is not None:
            out.append(m)
    tb = {bw.id: bw for bw in t.backwards}
    for bbw in b.backwards:
        tbw = tb.get(bbw.id)
        if tbw is None or backward_roots.get(bbw.id) in nondet:
            held = sum(g is not None for g in bbw.grads.values())
            skip["gradient: " + ("its backward ran in burn only" if tbw is None
                                 else "the root is random (dropout)")] += held
            continue
        for ident, bg in bbw.grads.items():
            tg = tbw.grads.get(ident)
            if bg is None or tg is None or bg.shape != tg.shape or ident in merged.get(bbw.id, ()):
                if bg is not None:
                    skip["gradient: " + ("burn holds it, PyTorch not" if tg is None
                                         else "routed differently (declared rule)" if ident in merged.get(bbw.id, ())
                                         else "shapes differ")] += 1
                continue
            m = _numeric("grad", ident, index.get(ident), tg, bg, bbw.id, dtypes.get(ident, program.dtype))
            if m is not None:
                out.append(m)


def _numeric(kind: str, ident: str, i: int | None, t: TensorObs, b: TensorObs, backward: str | None,
             dtype: str = "float32") -> Mismatch | None:
    # most compared tensors are equal element for element (86% of them in a campaign): equal
    # finite elements pass the screen and none is non-finite (a non-finite element makes the sum
    # non-finite; a finite sum that overflows only sends it the long way)
    if t.data == b.data and math.isfinite(sum(t.data)):
        return None
    bad = tol.screen_failures(t.data, b.data, dtype)
    # equal non-finite results pass the screen, but are still checked against float64
    # (numerics.judge_nonfinite): where float64 is finite, both overflowed
    isfinite = math.isfinite  # equal_nonfinite inline (x != x: NaN), as comparisons run it on every element
    both = [j for j, (x, y) in enumerate(zip(t.data, b.data)) if not isfinite(x) and (x == y or (x != x and y != y))]
    if not bad and not both:
        return None

    def size(j: int) -> float:
        x, y = t.data[j], b.data[j]
        if not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        return abs(x - y) / max(abs(x), abs(y), tol.TINY)

    j = max(bad, key=size) if bad else both[0]
    x, y = t.data[j], b.data[j]
    name = "grad" if kind == "grad" else ""
    where = f"at backward {backward}; " if backward else ""
    what = (f"{len(bad)} of {len(t.data)} element(s) differ by more than {tol.SCREEN / tol.F32_EPS:.0f} ulps"
            if bad else f"{len(both)} of {len(t.data)} element(s) equal and not finite")
    return Mismatch(kind, ident, i, None, f"torch{'.' + name if name else ''}[{j}]={x!r}",
                    f"burn{'.' + name if name else ''}[{j}]={y!r}", f"{where}{what}", element=j, pair=(x, y),
                    backward=backward, elements=tuple(sorted({*bad, *both})))


@remembered
def _sorted_values(program: Program) -> list[str]:
    """The program's value ids, sorted (shared: not to be changed)."""
    return sorted(st.id for st in program.statements if is_value(st))


@remembered
def _positions(program: Program) -> dict[str, int]:
    """Each statement's index by id (shared: not to be changed)."""
    return {st.id: i for i, st in enumerate(program.statements)}


@remembered
def _backward_roots(program: Program) -> dict[str, str]:
    """Each backward's root by the backward's id (shared: not to be changed)."""
    return {st.id: st.input for st in program.statements if isinstance(st, Backward)}


def equal_nonfinite(x: float, y: float) -> bool:
    """Both results the same inf, or both NaN."""
    return not math.isfinite(x) and (x == y or (math.isnan(x) and math.isnan(y)))


def _dtypes(program: Program, obs: Observation, out: list[Mismatch]) -> None:
    """Every value and gradient a framework reports must be in its own dtype: the program's, or
    the one a cast before it made (ops/value_dtypes.py, docs/format.md#dtypes); a gradient
    in the dtype of the value it is the gradient of."""
    fw = obs.framework
    index = _positions(program)
    dtypes = value_dtypes(program)
    for val in obs.values:
        want = dtypes.get(val.id, program.dtype)
        if val.value.dtype != want:
            out.append(Mismatch("dtype", val.id, index.get(val.id), fw, want, val.value.dtype,
                                f"value {val.id} is {val.value.dtype}, expected {want} ({program.dtype} program)"))
    for bw in obs.backwards:
        for ident, g in bw.grads.items():
            if g is None:
                continue
            want = dtypes.get(ident, program.dtype)
            if g.dtype != want:
                out.append(Mismatch("dtype", ident, index.get(ident), fw, want, g.dtype,
                                    f"at backward {bw.id}: the gradient of {ident} is {g.dtype}, expected {want} "
                                    f"(the dtype of {ident}; {program.dtype} program)"))


def _completeness(program: Program, obs: Observation, out: list[Mismatch]) -> None:
    """The values, backwards and gradient keys a framework reports must be exactly those the
    program defines up to where it stopped (its error, if any)."""
    fw = obs.framework
    stop = obs.error.index if obs.error is not None and obs.error.index is not None else None
    if obs.error is not None and (obs.error.kind in ("crash", "timeout") or obs.error.kind.startswith("invalid")):
        return
    ran = program.statements[:stop] if stop is not None else program.statements
    want_values = [st.id for st in ran if is_value(st)]
    got_values = [v.id for v in obs.values]
    if got_values != want_values:
        missing = [x for x in want_values if x not in got_values]
        extra = [x for x in got_values if x not in want_values]
        out.append(Mismatch("incomplete", None, None, fw, f"values {want_values}", f"values {got_values}",
                            f"missing {missing}, extra {extra}, or out of order"))
    want_bw = [st.id for st in ran if isinstance(st, Backward)]
    got_bw = [bw.id for bw in obs.backwards]
    if got_bw != want_bw:
        out.append(Mismatch("incomplete", None, None, fw, f"backwards {want_bw}", f"backwards {got_bw}",
                            "a backward the program ran is missing from the report, or one is extra"))
    defined: list[str] = []
    backwards = {bw.id: bw for bw in obs.backwards}
    for i, st in enumerate(ran):
        if isinstance(st, Backward) and st.id in backwards:
            keys = sorted(backwards[st.id].grads)
            if keys != sorted(defined):
                missing = sorted(set(defined) - set(keys))
                extra = sorted(set(keys) - set(defined))
                out.append(Mismatch("incomplete", st.id, i, fw, f"gradient entries for {sorted(defined)}",
                                    f"entries for {keys}", f"missing {missing}, extra {extra}"))
        elif is_value(st):
            defined.append(st.id)
