"""A failing op that burn builds from other ops, run as its parts (ops/compositions.py).

The localiser names the first op whose one-op program fails. When that op is a composite (square,
silu, var, the losses, squeeze, ...), the fault may be in a part burn builds it from, which then
shows in every composite of that part: one wrong mul derivative was a case for mul, one for
square, one for silu, one for each loss. So the composite's failing one-op program is run again
with the op replaced by its parts (`as_parts`), on the same inputs. The part is named in the
composite's stead only when

- burn computes the same numbers both ways (`same_numbers`: the result and every input's
  gradient, within a few units of the dtype's rounding), so the composite is its parts in
  burn: a composite with a fault of its own, or a composition declared wrong, differs here
  and keeps its own name; and
- the parts fail the oracle too, and their own localisation names a part that fails alone,
  or a mechanism every op shares that the parts show (the sum of a value's gradient
  contributions: square's x * x, silu's x and sigmoid(x) read one value twice).

Each part has a budget of its own, so the parts may pass where the composite fails or only
deviates (a suspect); they are then localised by that deviation (`inside`), and the finding is a
suspect. The localisation records the composites it descended through (`inside`) and keeps the
part's own one-op program as the reproducer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

from difftest.findings.deviation import deviant
from difftest.findings.error_classes import observed_tensor
from difftest.findings.localisation import Localisation
from difftest.findings.one_op import HARNESS_OP, PARAM_READ, cotangent, module_chain
from difftest.findings.unshared import part_statement, unshared
from difftest.ops.catalog import CATALOG
from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.burn_devices import burn_inference_forwards
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.dtypes import EPS
from difftest.program.ir import (
    Apply,
    Backward,
    Leaf,
    Module,
    OpCall,
    Param,
    Program,
    ProgramError,
    Statement,
    Transform,
    reads,
)
from difftest.program.modules import module_kind
from difftest.program.observation import TensorObs
from difftest.program.parts import Call, Part
from difftest.program.shapes import ShapeError

ROOT = "y"  # the op's statement in a one-op program (one_op.one_op_program)
ROUNDING_UNITS = 8  # how far burn's numbers for the composite and for its parts may differ, in eps
SHARED = ("accumulate", "broadcast")  # localisation mechanisms every op shares (localisation.py)


def as_parts(p: Program) -> Program | None:
    """The one-op program `p` with its op (statement `y`) replaced by the parts burn builds it of,
    the last part keeping the id `y`; None when the op declares no composition for these
    attributes and input shapes, or the parts do not form a valid program."""
    table = p.by_id()
    st = table.get(ROOT)
    inputs = st.inputs if isinstance(st, OpCall) else (st.input,) if isinstance(st, Apply) else ()
    chain = _chain(table, st.module) if isinstance(st, Apply) else None
    module = chain[0] if chain else None
    kind = module_kind(module.module) if isinstance(module, Module) else None
    composed = (CATALOG[st.op].composed if isinstance(st, OpCall) and st.op in CATALOG else
                kind.composed if kind is not None else None)
    if st is None or composed is None:
        return None
    leaves = [table.get(i) for i in inputs]
    data = [x.data for x in leaves if isinstance(x, Leaf)]
    # a module's parameters, each a leaf of the name the one-op program reads it by (param_<name>)
    params = {name: t for name in kind.params if (t := module.tensor(name)) is not None} if (
        kind is not None and isinstance(module, Module)) else {}
    tracked = _params_tracked(chain or [])
    held = {name: Leaf(f"{PARAM_READ}{name}", t.shape, t.data, "autodiff", tracked) for name, t in params.items()}
    # a module's buffers (running statistics), constants of the forward on the input's device
    device = leaves[0].device if leaves and isinstance(leaves[0], Leaf) else "autodiff"
    buffers = {name: Leaf(f"{ROOT}_{name}", t.shape, t.data, device, False) for name in kind.buffers
               if (t := module.tensor(name)) is not None} if kind is not None and isinstance(module, Module) else {}
    try:
        shapes = infer_shapes(p)
        call = Call(dict(st.attrs) if isinstance(st, OpCall) else module.config() if isinstance(module, Module) else {},
                    [tuple(shapes[i]) for i in inputs], data if len(data) == len(leaves) else None,
                    value_dtypes(p).get(inputs[0], p.dtype), tuple(params),
                    param_shapes={name: tuple(t.shape) for name, t in params.items()},
                    inference=kind is not None and kind.stateful and ROOT in burn_inference_forwards(p))
        parts = composed(call)
    except (ProgramError, ShapeError, ValueError, KeyError, IndexError, ZeroDivisionError):
        return None
    if not parts:
        return None
    ids = [f"{ROOT}_p{k}" for k in range(len(parts) - 1)] + [ROOT]

    def ref(x: int | str) -> str:
        if isinstance(x, int):
            return inputs[x]
        if x.startswith("param:"):
            return held[x.removeprefix("param:")].id
        if x.startswith("buffer:"):
            return buffers[x.removeprefix("buffer:")].id
        return ids[int(x[1:])]

    def statement(k: int, part: Part) -> Statement:
        region = st.region if isinstance(st, OpCall) else "grad"
        return part_statement(ids[k], part, [ref(x) for x in part.inputs], region)

    # a module's handle and its parameter reads give way to the parameters' leaves; a program that
    # uses the handle otherwise (a transform, a step) is no forward alone
    handles = {h.id for h in chain or []}
    mine = handles | {s.id for s in p.statements if isinstance(s, Param) and s.module in handles}
    if any(set(reads(s).modules) & handles and s.id not in mine and s is not st for s in p.statements):
        return None
    out: list[Statement] = []
    try:
        for s in p.statements:
            if s is st:
                out.extend(statement(k, x) for k, x in enumerate(parts))
            elif isinstance(module, Module) and s.id == module.id:
                out.extend(held.values())
                out.extend(buffers.values())
            elif s.id not in mine:
                out.append(s)
        return p.with_statements(tuple(out))
    except (ProgramError, IndexError, ValueError, KeyError):
        return None


def _chain(table: dict[str, Statement], handle: str) -> list[Statement] | None:
    """The module a handle derives from, then the transforms to it (one_op.module_chain); None
    for a chain whose forward is not the module's on autodiff (`valid`: burn's inner backend,
    another kernel) or that holds a step (its parameters are no longer the inline ones)."""
    chain = module_chain(table, handle)
    if chain is None or any(isinstance(t, Transform) and t.transform == "valid" for t in chain):
        return None
    return chain


def _params_tracked(chain: list[Statement]) -> bool:
    """Whether the module's parameters require grad at the end of the chain (freeze and no_grad
    stop them, unfreeze restores them)."""
    tracked = True
    for t in chain[1:]:
        if isinstance(t, Transform) and t.transform in ("freeze", "no_grad", "unfreeze"):
            tracked = t.transform == "unfreeze"
    return tracked


def close(a: TensorObs | None, b: TensorObs | None, dtype: str) -> bool:
    if a is None or b is None:
        return a is b
    if a.shape != b.shape or len(a.data) != len(b.data):
        return False
    finite = [abs(x) for x in a.data if math.isfinite(x)]
    bound = ROUNDING_UNITS * EPS.get(a.dtype if a.dtype in EPS else dtype, EPS["float32"]) * max(finite, default=0.0)
    for x, y in zip(a.data, b.data):
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif abs(x - y) > bound:
            return False
    return True


def same_numbers(whole: Verdict, parts: Verdict, value_only: bool = False, judged: bool = False) -> bool:
    """Whether burn computed the op's result and every gradient of the one-op program alike as
    the op (`whole`) and as its parts: the composite is its parts, in burn (`value_only`: the
    result alone). `judged`: a gradient neither verdict finds wrong (each within its own noise
    budget of PyTorch's) is not compared. The parts may order a sum otherwise than burn's op (a
    matmul against a transposed view, where burn's Linear holds the weight contiguous), and where
    a gradient cancels, that rounding exceeds a few units of its small result; what tells a
    composition burn computes from one it does not is where the verdicts find burn wrong."""
    wb, pb = whole.burn, parts.burn
    if (wb.error is None) != (pb.error is None):
        return False
    mine, theirs_value = wb.value(ROOT), pb.value(ROOT)
    if not close(mine.value if mine else None, theirs_value.value if theirs_value else None, whole.program.dtype):
        return False
    if value_only:
        return True
    theirs = {bw.id: bw for bw in pb.backwards}
    for bw in wb.backwards:
        other = theirs.get(bw.id)
        if other is None or not set(bw.grads) <= set(other.grads):  # the parts' own gradients besides
            return False
        wrong = {f.statement for v in (whole, parts) for f in v.findings if f.backward == bw.id}
        if not all(close(g, other.grads[ident], whole.program.dtype) for ident, g in bw.grads.items()
                   if not judged or ident in wrong):
            return False
    return True


def computed_as_parts(program: Program, st: OpCall, values: Mapping[str, TensorObs],
                      judge: Callable[[Program], Verdict | None]) -> bool:
    """Whether burn computes the op call `st` of `program` as the parts its composition declares,
    result and gradients (`same_numbers`), on burn's values of its inputs (`values`), each
    distinct input a tracked leaf, the result times a fixed cotangent that is not constant
    (one_op.cotangent): a tree built through the parts (unshared.py) is then burn's
    own computation. A fault in the op that its parts do not share (an injected one, or a
    composition declared wrong) fails it."""
    dtypes = value_dtypes(program)
    leaves: dict[str, Leaf] = {}
    for i in st.inputs:
        v = values.get(i)
        if v is None or dtypes.get(i, program.dtype) != program.dtype:
            return False
        if i not in leaves:
            leaves[i] = Leaf(f"a{len(leaves)}", v.shape, v.data, "autodiff", True)
    out = values.get(st.id)
    if out is None:
        return False
    # a cotangent that is not constant: ones give softmax's and the normalisations' inputs a zero
    # gradient, where any fault in it vanishes
    ct = Leaf("ct", out.shape, cotangent(len(out.data)), "autodiff", False)
    try:
        p = Program((*leaves.values(), OpCall(ROOT, st.op, tuple(leaves[i].id for i in st.inputs), dict(st.attrs)),
                     ct, OpCall("z", HARNESS_OP, (ROOT, ct.id)), Backward("bw", "z")), program.dtype)
    except (ProgramError, ValueError):
        return False
    q = as_parts(p)
    whole = judge(p) if q is not None else None
    parts = judge(q) if q is not None and whole is not None else None
    return whole is not None and parts is not None and same_numbers(whole, parts)


def _same_place(parts: Verdict, m: Mismatch) -> Mismatch | None:
    """The finding of the parts' program where the op's showed `m` (same kind, statement and
    backward), else its first of that kind."""
    same = [f for f in parts.findings if f.kind == m.kind and f.statement == m.statement and f.backward == m.backward]
    return next(iter(same or [f for f in parts.findings if f.kind == m.kind]), None)


def inside(found: Localisation, judge: Callable[[Program], Verdict | None],
           localise: Callable[[Verdict, Mismatch], Localisation | None]) -> Localisation | None:
    """The localisation of `found` (the one-op program of a composite op, failing or a suspect:
    passing, with burn far off the float64 result, deviation.py) to the part burn builds the
    composite from that is at fault, or None: the op is no composite, burn computes it otherwise
    than its parts, the parts show nothing, or no part shows it on its own.

    Parts that fail are localised as any failing program. Parts that pass but deviate (each part
    has a budget of its own, so a fault the composite's budget shows can hide within theirs, as
    in float16's x * sigmoid(x)) are localised by that deviation: a part is named where its own
    one-op program fails or deviates, and the sum of a value's contributions where the parts
    computed as a tree (each value once per path that reads it) stop deviating; the result is
    then a suspect."""
    whole, m = found.one_op, found.mismatch
    # PyTorch's own fault is no part of burn's composition
    if found.program is None or whole is None or m is None or found.confidence not in ("fails", "suspect") or (
            found.verdict == "torch-wrong"):
        return None
    q = as_parts(found.program)
    if q is None:
        return None
    parts = judge(q)
    # a composite that fails is compared where a verdict finds burn wrong; one that only deviates
    # (a suspect: nothing is found wrong) at every gradient
    if parts is None or not same_numbers(whole, parts, judged=found.confidence == "fails"):
        return None
    if not parts.ok:
        f = _same_place(parts, m)
        loc = localise(parts, f) if f is not None else None
        named = _named_inside(found, q, loc, ("fails",))
        return replace(named, verdict=found.verdict) if named is not None else None
    d = deviant(parts, m.kind)
    d = d if d is not None and _beyond_rounding(parts, d[1]) else None
    loc = localise(parts, d[1]) if d is not None else None
    if loc is not None and d is not None and loc.where == "graph" and not loc.inside and loc.confidence != "summed":
        # the graph's mechanism shows in a tree that passes where the shared program fails; here
        # both pass, so the tree must stop deviating too (a composite among the parts checked
        # its own parts' tree; burn's sum apart from its copies' needs no comparison)
        tree = unshared(q, d[1])
        tv = judge(tree) if tree is not None else None
        if tv is None or not tv.ok or deviant(tv, m.kind) is not None:
            return None
    named = _named_inside(found, q, loc, ("fails", "suspect"))
    return replace(named, confidence="suspect", verdict=found.verdict) if named is not None else None


def _beyond_rounding(parts: Verdict, d: Mismatch) -> bool:
    """Whether burn's deviation in the parts' program is beyond what their coarsest rounding makes
    of the result: burn's distance from the float64 result, median over `d`'s elements, is at
    least ROUNDING_UNITS / 2 units of that rounding of it. A deviation measured against a PyTorch
    run that happens to round closer (a float64 RmsNorm's parts take the mean of two squares in
    float32, and PyTorch's lands 30 times nearer at some elements) names nothing."""
    dtypes = set(value_dtypes(parts.program).values()) | {parts.program.dtype}
    eps = max(EPS.get(t, EPS["float32"]) for t in dtypes)
    ref, burn = observed_tensor(parts.reference, d), observed_tensor(parts.burn, d)
    if ref is None or burn is None or len(ref.data) != len(burn.data):
        return False
    units = sorted(abs(burn.data[e] - ref.data[e]) / (eps * abs(ref.data[e]))
                   for e in (d.elements or ((d.element,) if d.element is not None else ()))
                   if e < len(ref.data) and math.isfinite(burn.data[e]) and math.isfinite(ref.data[e]) and ref.data[e])
    return bool(units) and units[len(units) // 2] >= ROUNDING_UNITS / 2


def _named_inside(found: Localisation, q: Program, loc: Localisation | None,
                  confident: tuple[str, ...]) -> Localisation | None:
    """`found` named by `loc`, the localisation of its parts' program `q`: a mechanism every op
    shares, or a part whose own one-op program shows the fault (`confident`); else None."""
    if loc is None:
        return None
    if loc.mechanism in SHARED:
        # what a part shows and every op shares (the sum of x's contributions, which silu's x and
        # sigmoid(x) both read): named by the mechanism, with the composite alone as the reproducer
        # where the mechanism has no one-op program of its own (`graph`)
        inner = loc if loc.program is not None else replace(loc, program=found.program, one_op=found.one_op,
                                                           mismatch=found.mismatch)
    elif loc.statement is not None and loc.confidence in confident and loc.where not in ("graph", "backward"):
        inner = loc
    else:
        return None  # the parts fail together, none alone: the composite keeps its name
    part = loc.part if loc.inside else loc.statement
    return replace(inner, statement=found.statement, inside=(found.where, *loc.inside),
                   composed=(loc.composed if loc.inside else q) if part else None, part=part)


def as_composed(found: Localisation, judge: Callable[[Program], Verdict | None]) -> bool | None:
    """For a failing composite that keeps its name (`inside` named no part): whether burn
    computes its one-op program as the declared parts (`same_numbers`), where PyTorch's run of
    the parts agrees with burn's (they pass: the value, for a value finding; None where they do
    not, which says nothing of the composite). True: the finding is the composition's own difference
    from the op, exactly: what a known bug of the form "burn computes it as these parts" says
    (an RmsNorm's root mean square in float32). None where no composition applies."""
    if found.program is None or found.one_op is None or found.confidence != "fails":
        return None
    q = as_parts(found.program)
    parts = judge(q) if q is not None else None
    if parts is None:
        return None
    # parts that fail themselves say nothing of the composite (a fault in an op among them, which
    # the composite's inside does not run: the interpreter's fault injection is one): no answer
    if found.kind == "value":  # the forward alone: a gradient's own fault is another finding
        if any(f.kind == "value" for f in parts.findings):
            return None
        return same_numbers(found.one_op, parts, value_only=True)
    return same_numbers(found.one_op, parts) if parts.ok else None
