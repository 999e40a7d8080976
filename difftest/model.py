"""The semantic model: predicts, per framework, every value's autodiff flags, which values
get a gradient at each backward, and where a framework fails. Pure Python, no tensors.

Base semantics are PyTorch's autograd (see rules.py for how burn's flags are derived from it);
declared rules override the base where the frameworks documentedly differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .catalog import CATALOG
from .ir import Backward, Cut, Leaf, OpCall, Program, Shape, Statement
from .rules import RULES, Framework, Rule, Step
from .states import EMPTY, BurnState, Failure, Result, State, TorchState
from .strides import contiguous_strides, is_contiguous
from .validate import infer_shapes


@dataclass(frozen=True)
class Firing:
    rule: str
    framework: Framework
    index: int
    statement: str
    base: Result  # what the framework would do without the rule (for staleness)
    predicted: Result


@dataclass
class FrameworkPrediction:
    framework: Framework
    states: dict[str, State] = field(default_factory=dict)
    failure: tuple[int, str, Failure] | None = None  # (index, statement id, failure)
    grads: dict[str, dict[str, bool]] = field(default_factory=dict)  # backward id -> value -> present
    base_states: dict[str, Result] = field(default_factory=dict)


@dataclass
class Prediction:
    burn: FrameworkPrediction
    torch: FrameworkPrediction
    firings: list[Firing]

    def of(self, framework: str) -> FrameworkPrediction:
        return self.burn if framework == "burn" else self.torch

    @property
    def rules_fired(self) -> list[str]:
        seen: list[str] = []
        for f in self.firings:
            if f.rule not in seen:
                seen.append(f.rule)
        return seen


def predict(program: Program, rules: Sequence[Rule] = RULES) -> Prediction:
    shapes = infer_shapes(program)
    firings: list[Firing] = []
    burn = _run("burn", program, shapes, [r for r in rules if r.framework == "burn"], firings)
    torch = _run("torch", program, shapes, [r for r in rules if r.framework == "torch"], firings)
    return Prediction(burn, torch, firings)


def _run(
    fw: Framework, program: Program, shapes: dict[str, Shape], rules: list[Rule], firings: list[Firing]
) -> FrameworkPrediction:
    pred = FrameworkPrediction(fw)
    consumed: set[str] = set()
    for i, st in enumerate(program.statements):
        if isinstance(st, Backward):
            root = pred.states[st.input]
            if isinstance(root, TorchState):
                # a view made under no_grad reports requires_grad but has no graph to walk
                ok = root.requires_grad and (root.has_grad_fn or root.key is not None)
            else:
                ok = root.is_tracked
            if not ok:
                kind = "exception" if fw == "torch" else "panic"
                pred.failure = (i, st.id, Failure(kind, f"backward of {st.input!r}, which is not in a graph"))
                return pred
            pred.grads[st.id] = {
                v: (s.key is not None and s.key in root.sources) for v, s in pred.states.items()
            }
            consumed.add(st.input)
            continue
        inputs = tuple(pred.states[x] for x in _inputs(st))
        base = _base_torch(st, inputs, shapes) if fw == "torch" else _base_burn(st, inputs)
        current: Result = base
        for rule in rules:
            step = Step(i, st, inputs, current)
            if rule.applies(step):
                new = rule.effect(step)
                firings.append(Firing(rule.name, fw, i, st.id, base, new))
                current = new
        pred.base_states[st.id] = base
        if isinstance(current, Failure):
            pred.failure = (i, st.id, current)
            return pred
        pred.states[st.id] = current
    return pred


def _inputs(st: Statement) -> tuple[str, ...]:
    if isinstance(st, Leaf):
        return ()
    if isinstance(st, OpCall):
        return st.inputs
    assert isinstance(st, (Cut, Backward))
    return (st.input,)


def _union(states: Sequence[State]) -> frozenset[str]:
    out: frozenset[str] = EMPTY
    for s in states:
        out = out | s.sources
    return out


def _base_torch(st: Statement, inputs: tuple[State, ...], shapes: dict[str, Shape]) -> TorchState:
    """PyTorch autograd, including its view semantics: a view made inside no_grad /
    inference_mode keeps its base's requires_grad (as a leaf without grad_fn, whose gradient
    reaches nobody) and its base's inference-ness."""
    ins = [s for s in inputs if isinstance(s, TorchState)]
    if isinstance(st, Leaf):
        key = st.id if st.require_grad else None
        return TorchState(st.require_grad, True, False, False, key,
                          frozenset({st.id}) if key else EMPTY, contiguous_strides(st.shape))
    if isinstance(st, Cut):
        x = ins[0]
        if st.cut == "autodiff":
            return x  # identity: the same tensor object
        return TorchState(False, True, False, x.is_inference, strides=x.strides)  # detach is a view
    assert isinstance(st, OpCall)
    spec = CATALOG[st.op]
    x = ins[0]
    in_shape = shapes[st.inputs[0]]
    is_view = spec.view is not None and (
        not spec.view_needs_contiguous or is_contiguous(in_shape, x.strides)
    )
    strides = spec.view(in_shape, x.strides, st.attrs) if spec.view and is_view else contiguous_strides(shapes[st.id])
    if st.region != "grad":
        if is_view:
            return TorchState(x.requires_grad, True, False, x.is_inference, strides=strides)
        return TorchState(False, True, False, st.region == "inference_mode", strides=strides)
    if is_view and x.is_inference:
        return TorchState(False, True, False, True, strides=strides)
    if any(s.requires_grad for s in ins):
        return TorchState(True, False, True, False, None, _union(ins), strides)
    return TorchState(False, True, False, False, strides=strides)


def _base_burn(st: Statement, inputs: tuple[State, ...]) -> BurnState:
    """burn as if it followed PyTorch's autograd, mapped onto burn's three flags."""
    ins = [s for s in inputs if isinstance(s, BurnState)]
    if isinstance(st, Leaf):
        ad = st.device == "autodiff"
        key = st.id if st.require_grad else None
        return BurnState(ad, st.require_grad, st.require_grad, key, frozenset({st.id}) if key else EMPTY)
    if isinstance(st, Cut):
        x = ins[0]
        if st.cut == "autodiff":
            return BurnState(True, x.is_tracked, x.is_require_grad, x.key, x.sources)
        return BurnState(x.is_autodiff, False, False)  # detach and (base) without_autodiff
    assert isinstance(st, OpCall)
    ad = any(s.is_autodiff for s in ins)
    if st.region != "grad":
        return BurnState(ad, False, False)
    tracked = any(s.is_tracked for s in ins)
    return BurnState(ad, tracked, False, None, _union([s for s in ins if s.is_tracked]))
