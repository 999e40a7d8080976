"""The semantic model: predicts, per framework, every value's autodiff flags, which values
get a gradient at each backward, and where a framework fails. Pure Python, no tensors.

Base semantics are PyTorch's autograd (see difftest/divergences/rules.py for how burn's flags
are derived from it); declared rules override the base where the frameworks documentedly differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from difftest.divergences.knowledge import Framework
from difftest.divergences.messages import consumed_backward, untracked_backward
from difftest.divergences.rules import (
    RULES,
    Rule,
    Step,
    module_param_keys,
)
from difftest.divergences.session_rules import CONSUMES_GRAPH, NO_RETAIN_GRAPH
from difftest.divergences.states import (
    EMPTY,
    BackwardResult,
    BurnState,
    Failure,
    ModuleState,
    Result,
    SessionContext,
    State,
    TorchState,
)
from difftest.ops.strides import contiguous_strides
from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle import sessions
from difftest.oracle.base_states import APPLY, CUT, LEAF, OP, PARAM, Base, module_handle, transform_handle
from difftest.program.ir import (
    Apply,
    Backward,
    ByKind,
    Grad,
    Module,
    Param,
    Program,
    Shape,
    Statement,
    Transform,
    ZeroGrad,
    is_value,
    root_module,
    value_inputs,
)
from difftest.program.ir import Step as StepStatement
from difftest.program.modules import module_kind
from difftest.program.recent import statements_by_id


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
    modules: dict[str, ModuleState] = field(default_factory=dict)  # module handles
    # how later statements see a value, where that differs from its reported state (burn: a
    # `param` weight is read transposed from burn's [in, out] parameter, a new tracked node)
    as_input: dict[str, State] = field(default_factory=dict)
    # values whose data this framework draws at random (dropout masks) or computes from such
    # values: their data, and the gradients of a backward rooted at one, are not comparable
    nondet: set[str] = field(default_factory=set)
    # modules (their `module` statements) whose buffers a forward updated from a value that is
    # not comparable: their running statistics differ between the frameworks from then on, so
    # reads of them, and forwards that normalise with them (eval mode), are not comparable
    stale_buffers: set[str] = field(default_factory=set)
    roots: dict[str, str] = field(default_factory=dict)  # backward id -> its root
    # value -> grad key -> the statements through which that key's gradient reaches the value
    # (a module's own parameters enter an apply as "<apply>#<param>"): where the two frameworks
    # route a gradient differently (declared rules), its value is not comparable
    paths: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    # sessions (sessions.py, session_rules.py): graph nodes earlier backwards left unusable
    # (node -> the rule that consumed it, "" for the base semantics), each backward's grad keys,
    # the grad keys steps took out of a handle (burn), and the backwards `.grad` has
    # accumulated per grad key since the last zero_grad (PyTorch)
    consumed: dict[str, str] = field(default_factory=dict)
    handle_keys: dict[str, frozenset[str]] = field(default_factory=dict)
    taken: dict[str, set[str]] = field(default_factory=dict)
    accumulated: dict[str, set[str]] = field(default_factory=dict)

    def input_state(self, ident: str) -> State:
        return self.as_input.get(ident) or self.states[ident]


@dataclass
class Prediction:
    burn: FrameworkPrediction
    torch: FrameworkPrediction
    firings: list[Firing]
    # backward id -> values whose gradient *values* are not comparable: the frameworks route
    # different contributions to them (e.g. burn sums over handles sharing a parameter,
    # clone-shares-params; a valid() forward of a tracked input, valid-with-autodiff-input)
    incomparable_grads: dict[str, set[str]] = field(default_factory=dict)

    def of(self, framework: str) -> FrameworkPrediction:
        return self.burn if framework == "burn" else self.torch

    @property
    def nondet(self) -> set[str]:
        """Values not comparable between the frameworks: random in either of them."""
        return self.burn.nondet | self.torch.nondet

    @property
    def rules_fired(self) -> list[str]:
        seen: list[str] = []
        for f in self.firings:
            if f.rule not in seen:
                seen.append(f.rule)
        return seen


def predict(program: Program, rules: Sequence[Rule] = RULES, *,
            at_burn_backward: BackwardHook | None = None, at_torch_backward: BackwardHook | None = None) -> Prediction:
    """`at_burn_backward(i, st, pred)`: called with burn's state before each backward it reaches
    (it must not change `pred`; difftest/oracle/probes.py collects the root probes there);
    `at_torch_backward` the same with PyTorch's (probe_predictions.py)."""
    shapes = infer_shapes(program)
    firings: list[Firing] = []
    burn = _run("burn", program, shapes, [r for r in rules if r.framework == "burn"], firings, at_burn_backward)
    torch = _run("torch", program, shapes, [r for r in rules if r.framework == "torch"], firings, at_torch_backward)
    incomparable = _incomparable_grads(burn, torch)
    _gradient_reads_not_comparable(program, burn, torch, incomparable)
    return Prediction(burn, torch, firings, incomparable)


def predict_burn(program: Program, rules: Sequence[Rule] = RULES) -> FrameworkPrediction:
    """burn's part of `predict(program, rules)`: its states, gradients and failure are the same
    (burn's run comes first and reads nothing of PyTorch's), without PyTorch's run; its `nondet`
    lacks what `predict` adds from the comparison of the two (the generator's questions:
    which values burn holds where, which gradients its handles hold)."""
    return _run("burn", program, infer_shapes(program), [r for r in rules if r.framework == "burn"], [])


def _gradient_reads_not_comparable(program: Program, burn: FrameworkPrediction, torch: FrameworkPrediction,
                                   incomparable: dict[str, set[str]]) -> None:
    """A `grad` of a gradient that is not comparable (a root not comparable in either
    framework, different routes) is not comparable either, nor is anything computed from it
    (recorded in burn's set; Prediction.nondet is the union)."""
    roots = {st.id: st.input for st in program.statements if isinstance(st, Backward)}
    nondet = burn.nondet
    nondet |= torch.nondet
    for st in program.statements:
        if isinstance(st, Grad) and (roots[st.grads] in nondet or st.of in incomparable.get(st.grads, ())):
            nondet.add(st.id)
        elif is_value(st) and any(x in nondet for x in value_inputs(st)):
            nondet.add(st.id)


def _incomparable_grads(burn: FrameworkPrediction, torch: FrameworkPrediction) -> dict[str, set[str]]:
    """For each backward, the values whose gradient reaches the root along different statements
    in the two frameworks (both have a gradient; only its value would differ)."""
    out: dict[str, set[str]] = {}
    for bw, root in torch.roots.items():
        if burn.roots.get(bw) != root:
            continue
        tp, bp = torch.paths.get(root, {}), burn.paths.get(root, {})
        for ident, ts in torch.states.items():
            bs = burn.states.get(ident)
            if ts.key is None or bs is None or bs.key is None:
                continue
            if tp.get(ts.key) != bp.get(bs.key):
                out.setdefault(bw, set()).add(ident)
    return out


BackwardHook = Callable[[int, Backward, "FrameworkPrediction"], None]


@dataclass
class _Run:
    """One framework's prediction under way (`_run`), what each statement kind's step reads."""

    fw: Framework
    program: Program
    shapes: dict[str, Shape]
    rules: list[Rule]
    firings: list[Firing]
    at_backward: BackwardHook | None
    pred: FrameworkPrediction
    dtypes: dict[str, str]


def _run(
    fw: Framework, program: Program, shapes: dict[str, Shape], rules: list[Rule], firings: list[Firing],
    at_backward: BackwardHook | None = None,
) -> FrameworkPrediction:
    """The framework's prediction, statement by statement; `at_backward(i, st, pred)` is called
    with the state before each backward (difftest/oracle/probes.py)."""
    pred = FrameworkPrediction(fw)
    run = _Run(fw, program, shapes, rules, firings, at_backward, pred, value_dtypes(program))
    for i, st in enumerate(program.statements):
        failure = _STEPS.of(st)(run, i, st)
        if failure is not None:
            pred.failure = (i, st.id, failure)
            return pred
    return pred


def _new_handle(run: _Run, i: int, st: Module | Transform, handle: ModuleState,
                source: ModuleState | None) -> Failure | None:
    """A module handle: its state as the rules leave it."""
    outcome = _apply_rules(run.fw, run.rules, run.firings,
                           Step(i, st, (), handle, source, checkpointing=run.program.checkpointing), handle)
    if isinstance(outcome, Failure):
        return outcome
    assert isinstance(outcome, ModuleState), outcome
    run.pred.modules[st.id] = outcome
    return None


def _backward_step(run: _Run, i: int, st: Backward) -> Failure | None:
    if run.at_backward is not None:
        run.at_backward(i, st, run.pred)
    return _backward(run.fw, i, st, run.program, run.pred, run.rules, run.firings, run.shapes)


def _zero_grad(run: _Run, i: int, st: ZeroGrad) -> None:
    run.pred.accumulated.clear()  # PyTorch: every .grad = None (burn keeps nothing to clear)


def _optimizer_step(run: _Run, i: int, st: StepStatement) -> None:
    run.pred.modules[st.id] = _step(run.fw, i, st, run.pred, run.rules, run.firings)


def _grad_read(run: _Run, i: int, st: Grad) -> Failure | None:
    outcome = _grad(run.fw, i, st, run.pred, run.rules, run.firings, run.shapes[st.id])
    if isinstance(outcome, Failure):
        return outcome
    assert isinstance(outcome, (TorchState, BurnState)), outcome
    run.pred.states[st.id] = outcome
    run.pred.base_states[st.id] = outcome
    return None


def _value(run: _Run, i: int, st: Statement, base: Base, module: ModuleState | None = None,
           own: frozenset[str] = EMPTY) -> State | Failure:
    """A value's state: its kind's base state with the rules on top, recorded with the
    statements its gradients reach it through and whether it is comparable. `module`: the
    module handle it reads, `own`: the grad keys of that module's parameters it uses."""
    pred = run.pred
    reads = value_inputs(st)
    inputs = tuple(pred.input_state(x) for x in reads)
    base_state = base.state(run.fw, st, inputs, run.shapes, module)
    step = Step(i, st, inputs, base_state, module, tuple(run.shapes[x] for x in reads),
                input_dtypes=tuple(run.dtypes.get(x, run.program.dtype) for x in reads),
                checkpointing=run.program.checkpointing)
    current = _apply_rules(run.fw, run.rules, run.firings, step, base_state)
    pred.base_states[st.id] = base_state
    if isinstance(current, Failure):
        return current
    assert isinstance(current, (TorchState, BurnState)), current
    pred.states[st.id] = current
    pred.paths[st.id] = _paths(st.id, current, reads, pred, own)
    if any(x in pred.nondet for x in reads) or (module is not None and module.diverged):
        pred.nondet.add(st.id)
    return current


def _plain_value(base: Base) -> Callable[[_Run, int, Statement], Failure | None]:
    """The step of a value kind that reads no module (a leaf, an op, a cut)."""
    def step(run: _Run, i: int, st: Statement) -> Failure | None:
        current = _value(run, i, st, base)
        return current if isinstance(current, Failure) else None
    return step


def _forward(run: _Run, i: int, st: Apply) -> Failure | None:
    """A module forward: its module's own parameters enter the paths; a dropout that draws a
    mask makes its value not comparable."""
    module = run.pred.modules[st.module]
    current = _value(run, i, st, APPLY, module, frozenset(module_param_keys(run.fw, module)))
    if isinstance(current, Failure):
        return current
    if _draws_mask(module, run.pred.input_state(st.input), current):
        run.pred.nondet.add(st.id)
    if module_kind(module.kind).stateful:
        # buffers shared by handles (and copied by valid() / train()) are keyed by the module
        # they come from: over-approximated, so a forward's update never goes unnoticed
        root = root_module(run.program, st.module).id
        if root in run.pred.stale_buffers and not (module.training and module.burn_training):
            run.pred.nondet.add(st.id)  # normalised with running statistics that differ
        if st.input in run.pred.nondet:
            run.pred.stale_buffers.add(root)
    return None


def _param_read(run: _Run, i: int, st: Param) -> Failure | None:
    """A parameter read; later statements see burn's transposed weight as a node of its own."""
    module = run.pred.modules[st.module]
    current = _value(run, i, st, PARAM, module)
    if isinstance(current, Failure):
        return current
    if isinstance(current, BurnState) and st.param in module_kind(module.kind).burn_transposed:
        run.pred.as_input[st.id] = _transposed(current)
    kind = module_kind(module.kind)
    if kind.is_buffer(st.param) and root_module(run.program, st.module).id in run.pred.stale_buffers:
        run.pred.nondet.add(st.id)
    return None


# each statement kind's step of the prediction; a Failure stops it there
_STEPS: ByKind[Callable[[_Run, int, Any], Failure | None]] = ByKind(
    "model",
    leaf=_plain_value(LEAF),
    op=_plain_value(OP),
    cut=_plain_value(CUT),
    backward=_backward_step,
    module=lambda run, i, st: _new_handle(run, i, st, module_handle(st), None),
    transform=lambda run, i, st: _new_handle(run, i, st, transform_handle(st, run.pred.modules),
                                              run.pred.modules.get(st.input)),
    apply=_forward,
    param=_param_read,
    grad=_grad_read,
    zero_grad=_zero_grad,
    optimizer=lambda run, i, st: None,
    step=_optimizer_step,
)


def _backward(fw: Framework, i: int, st: Backward, program: Program, pred: FrameworkPrediction,
              rules: list[Rule], firings: list[Firing], shapes: dict[str, Shape], *,
              outcome_only: bool = False, walker: sessions.Walker | None = None) -> Failure | None:
    """A backward: the root must be in a graph, and its graph must not reach a node an earlier
    backward consumed; it consumes what the rules say, and gives a fresh gradients handle.
    `outcome_only`: return as soon as the outcome is known, with `pred` unchanged (root probes,
    probes.py: only whether the backward fails; nothing before that point changes `pred`).
    `walker`: the walks over `pred`'s current states (shared by the probes of one backward)."""
    root = pred.input_state(st.input)
    if isinstance(root, TorchState):
        # a view made under no_grad reports requires_grad but has no graph to walk
        ok = root.requires_grad and (root.has_grad_fn or root.key is not None)
    else:
        ok = root.is_tracked
    if not ok:
        kind = "exception" if fw == "torch" else "panic"
        return Failure(kind, f"backward of {st.input!r}, which is not in a graph", untracked_backward(fw))
    if walker is None:
        walker = walker_of(program, pred, shapes)
    traversed, saving, leaves = walker(st.input)
    before = frozenset(pred.consumed)
    # a leaf root: the leaf itself, which an earlier backward may have consumed as a root
    rooted_at = {root.key} if not sessions.is_node(root) and root.key is not None else set()
    reused = sorted((traversed | rooted_at) & before)
    if reused:
        kind = "exception" if fw == "torch" else "panic"
        failure = Failure(kind, f"backward through {', '.join(reused)}, consumed by an earlier backward",
                          consumed_backward(fw))
        by_rule = {pred.consumed[n] for n in reused}
        if "" not in by_rule:  # every reused node is consumed only by a rule's say
            ok_base = BackwardResult(traversed, saving, before, EMPTY, st.retain_graph, leaves)
            for name in sorted(by_rule):
                firings.append(Firing(name, fw, i, st.id, ok_base, failure))
        return failure
    base = BackwardResult(traversed, saving, before, EMPTY if st.retain_graph else saving, st.retain_graph, leaves)
    result = _apply_rules(fw, rules, firings, Step(i, st, (root,), base), base)
    if isinstance(result, Failure) or outcome_only:
        return result if isinstance(result, Failure) else None
    assert isinstance(result, BackwardResult), result
    fired = [f.rule for f in firings if f.index == i and f.framework == fw and f.rule in (CONSUMES_GRAPH,
                                                                                          NO_RETAIN_GRAPH)]
    for node in result.consumes:
        pred.consumed.setdefault(node, "" if node in base.consumes else (fired[-1] if fired else ""))
    pred.grads[st.id] = {v: (s.key is not None and s.key in root.sources) for v, s in pred.states.items()}
    pred.roots[st.id] = st.input
    pred.handle_keys[st.id] = root.sources
    for key in root.sources:
        pred.accumulated.setdefault(key, set()).add(st.id)
    return None


def walker_of(program: Program, pred: FrameworkPrediction, shapes: dict[str, Shape]) -> sessions.Walker:
    """The backwards' walks over `pred`'s states as they are now (valid until they change)."""
    return sessions.Walker(statements_by_id(program), pred.states, pred.input_state, pred.modules, shapes)


def _step(fw: Framework, i: int, st: StepStatement, pred: FrameworkPrediction, rules: list[Rule],
          firings: list[Firing]) -> ModuleState:
    """An optimizer step: a new module handle with new parameter leaves (where they change)."""
    m = pred.modules[st.module]
    keys = module_param_keys(fw, m)
    in_handle = pred.handle_keys.get(st.grads, EMPTY)
    stepped = [k for k in keys if k in in_handle]
    if fw == "burn":
        pred.taken.setdefault(st.grads, set()).update(stepped)
    origin = m.burn_origin
    diverged = m.diverged
    if stepped and len(stepped) == len(keys):
        origin = st.id
    elif stepped:  # some parameters new leaves, others the old ones: not modelled per parameter
        diverged = True
    base = replace(m, id=st.id, burn_origin=origin, diverged=diverged)
    context = SessionContext(
        accumulated=tuple((k, frozenset(pred.accumulated.get(k, ()))) for k in keys),
        from_handle=tuple((k, frozenset({st.grads}) if k in in_handle else EMPTY) for k in keys),
    )
    result = _apply_rules(fw, rules, firings, Step(i, st, (), base, m, session=context), base)
    assert isinstance(result, ModuleState), result
    for k in keys:  # the new handle's parameters start without gradients (PyTorch: a copy)
        pred.accumulated.pop(k, None)
    return result


def _grad(fw: Framework, i: int, st: Grad, pred: FrameworkPrediction, rules: list[Rule],
          firings: list[Firing], shape: Shape) -> Result:
    """A gradient read from a handle: a constant (no autodiff association), or a failure when
    the handle has no gradient for the value."""
    present = pred.grads.get(st.grads, {}).get(st.of, False)
    base: Result
    if not present:
        base = Failure("missing-gradient", f"{st.of!r} has no gradient in {st.grads!r}")
    elif fw == "torch":
        base = TorchState(False, True, False, False, strides=contiguous_strides(shape))
    else:
        base = BurnState(False, False, False)
    of = pred.states.get(st.of)
    context = SessionContext(taken=frozenset(pred.taken.get(st.grads, ())), key=of.key if of is not None else None)
    return _apply_rules(fw, rules, firings, Step(i, st, (), base, session=context), base)


def _apply_rules(fw: Framework, rules: list[Rule], firings: list[Firing], step: Step, base: Result) -> Result:
    current = base
    if step.current is not current:
        step = replace(step, current=current)
    st = step.statement
    for rule in rules:
        if isinstance(st, rule.on) and rule.applies(step):
            new = rule.effect(step)
            firings.append(Firing(rule.name, fw, step.index, step.statement.id, base, new))
            current = new
            step = replace(step, current=current)  # a rule sees what the rules before it made
    return current


def _paths(ident: str, state: State, inputs: tuple[str, ...], pred: FrameworkPrediction,
           own: frozenset[str]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for k in state.sources:
        acc = {ident}
        for x in inputs:
            acc |= pred.paths.get(x, {}).get(k, EMPTY)
        if k in own:
            acc.add(f"{ident}#{k.rsplit('.', 1)[-1]}")
        out[k] = frozenset(acc)
    return out


def _draws_mask(module: ModuleState, x: State, out: State) -> bool:
    """A dropout with 0 < p < 1 that did not return its input as is drew a random mask
    (burn's masks never match PyTorch's). p = 1 gives zeros in PyTorch (and panics in burn)."""
    return module.kind == "dropout" and 0.0 < module.p < 1.0 and out is not x


def _transposed(s: BurnState) -> BurnState:
    """burn's [in, out] weight transposed to PyTorch's layout: a new node when tracked."""
    if s.is_tracked:
        return BurnState(s.is_autodiff, True, False, None, s.sources, s.default_strategy)
    return BurnState(s.is_autodiff, False, False, default_strategy=s.default_strategy)
