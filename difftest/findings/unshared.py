"""A gradient no single op explains (localise.py: `graph`), tried once more with nothing shared.

autodiff sums the gradient contributions a value receives when more than one path reads it
(burn's `Gradients::register` adds each new one to the old). A fault there shows wherever a value
is read twice, through whatever op reads it, and no op alone fails: each such finding went to
`graph@<op>`, one case per op (an accumulation that scaled the earlier contribution by 1.01 made
19 of them in 3,000 programs). This builds the backward's forward as a tree: each value computed
once per path that reads it, down to a copy of each leaf per use, so that no node receives more
than one contribution. The values are the same; when that program passes and the original
fails, the fault is in the accumulation, and the finding is signed by it (`accumulate`).

Unsharing is no control where an op sits at a kink or a tie: reading one value twice at a tie
(select_max(x, x)) is a function differentiable along x, of which every framework must give the
derivative, while reading two copies of it is a tie of two leaves, where each leaf's gradient
only has to lie between its one-sided limits. So the unshared program counts as right only when
it passes without such a dismissal (`right_unshared`); otherwise the op is named as the original
program shows it.

burn against itself needs no such control (`summed_apart`): the tree computes the same values
with the same ops, so each copy of a leaf receives, in burn's own arithmetic and at a kink or a
tie too, exactly the contribution the shared leaf receives along that path, and the shared
leaf's gradient must be their sum. Where burn's gradient of the shared leaf is farther from the
sum of its copies' gradients than rounding can take it, burn's summation itself is shown wrong,
whatever either program's comparison with PyTorch says.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from difftest.findings.one_op import module_chain
from difftest.ops.catalog import CATALOG
from difftest.ops.validate import infer_shapes
from difftest.ops.value_dtypes import value_dtypes
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.dtypes import EPS
from difftest.program.ir import Apply, Backward, Cut, Leaf, OpCall, Program, ProgramError, Region, Statement, ancestors
from difftest.program.observation import Observation, TensorObs
from difftest.program.parts import Call, Part
from difftest.program.shapes import Shape, ShapeError

MAX_STATEMENTS = 64  # the tree of a small program; a larger one is not built
# how far burn's gradient of a shared leaf may lie from the sum of its copies' gradients, in
# units of the dtype's eps times the sum of the copies' magnitudes: the shared program rounds
# each partial sum once where the tree rounds each path's product (a unit or two; more where a
# later matmul or reduction mixes the summed elements with others and they cancel, which
# PyTorch's own distance between the two sums measures: TORCH_ROUNDINGS)
SUM_ULPS = 4.0
TORCH_ROUNDINGS = 16.0  # and this many times PyTorch's own distance between the two sums


def right_unshared(v: Verdict | None) -> bool:
    """Whether the unshared program's verdict shows it right: it passes, and no mismatch of it was
    dismissed as ill-conditioned (a kink judgment, which the shared program need not be owed)."""
    return v is not None and v.ok and not any(m.verdict == "ill-conditioned" for m in v.dismissals)


def summed_apart(shared: Verdict, m: Mismatch, tree: Program, tree_verdict: Verdict | None,
                 expanded_verdict: Verdict | None = None) -> bool:
    """Whether burn's gradient of `m`'s leaf in `shared` (the failing program, `m` a gradient
    finding of it) lies beyond rounding from the sum of the gradients burn gives its copies in
    `tree` (unshared(shared.program, m), checked as `tree_verdict`), at the median of `m`'s
    elements, where rounding is SUM_ULPS units of the copies' magnitudes or TORCH_ROUNDINGS times
    PyTorch's own distance between its two sums, whichever is more. Only where both frameworks
    ran both backwards and burn computed the same root (exactly equal values; no random op in
    either). A tree built through composites' parts is given `expanded_verdict`, the check of
    `expanded(shared.program, m, values)`: PyTorch computes a composite as one op in `shared`,
    so its rounding is measured between the program with the same parts and the tree."""
    leaf = str(m.statement)
    if tree_verdict is None or m.kind != "grad" or not m.backward or not same_root(shared, m, tree, tree_verdict):
        return False
    if shared.prediction.nondet or tree_verdict.prediction.nondet:
        return False
    burn = _shared_and_copies(shared.burn, tree_verdict.burn, m.backward, tree.statements[-1].id, leaf)
    reference = expanded_verdict.torch if expanded_verdict is not None else shared.torch
    torch = _shared_and_copies(reference, tree_verdict.torch, m.backward, tree.statements[-1].id, leaf)
    if burn is None or torch is None:
        return False
    (g, copies), (tg, tcopies) = burn, torch
    eps = EPS[value_dtypes(shared.program).get(leaf, shared.program.dtype)]
    elements = m.elements or ((m.element,) if m.element is not None else range(len(g.data)))
    beyond = []
    for e in elements:
        terms, tterms = [c.data[e] for c in copies], [c.data[e] for c in tcopies]
        if not all(map(math.isfinite, (*terms, *tterms, g.data[e], tg.data[e]))):
            continue
        # PyTorch's sum apart from its own copies' is the rounding this program's shape gives a
        # correct summation (a later matmul that cancels the summed elements magnifies it)
        rounding = max(SUM_ULPS * eps * math.fsum(map(abs, terms)),
                       TORCH_ROUNDINGS * abs(tg.data[e] - math.fsum(tterms)))
        beyond.append(abs(g.data[e] - math.fsum(terms)) > rounding)
    return bool(beyond) and sorted(beyond)[len(beyond) // 2]


def _shared_and_copies(program_run: Observation, tree_run: Observation, backward: str, tree_backward: str,
                       leaf: str) -> tuple[TensorObs, list[TensorObs]] | None:
    """A framework's gradient of `leaf` at `backward` of the program, and the gradients of the
    leaf's copies at the tree's backward; None when either is missing or their shapes differ."""
    mine = next((b.grads for b in reversed(program_run.backwards) if b.id == backward), None)
    theirs = next((b.grads for b in reversed(tree_run.backwards) if b.id == tree_backward), None)
    g = mine.get(leaf) if mine is not None else None
    pattern = re.compile(rf"u\d+_{re.escape(leaf)}")
    # a copy read only through a cut receives nothing, as the shared leaf does along that path
    copies = [t for ident, t in (theirs or {}).items() if pattern.fullmatch(ident) and t is not None]
    if g is None or not copies or any(c.shape != g.shape for c in copies):
        return None
    return g, copies


def same_root(shared: Verdict, m: Mismatch, tree: Program, tree_verdict: Verdict | None) -> bool:
    """Whether burn computed the root of `tree`'s backward (unshared(shared.program, m)) exactly
    as the root of `m`'s backward in `shared`: the tree is the program's forward, not a program
    of other values (a leaf or a module a step changed before the backward, a random op)."""
    original = shared.program.by_id().get(str(m.backward))
    bw = tree.statements[-1]
    if tree_verdict is None or not isinstance(original, Backward) or not isinstance(bw, Backward):
        return False
    x = next((o.value for o in shared.burn.values if o.id == original.input), None)
    y = next((o.value for o in tree_verdict.burn.values if o.id == bw.input), None)
    return x is not None and y is not None and x.shape == y.shape and x.data == y.data


def part_statement(ident: str, part: Part, inputs: Sequence[str], region: Region) -> Statement:
    """The statement `ident` a composition's part lowers to, its inputs already the program's
    ids: a constant leaf (untracked, on the autodiff device), a detach, or the catalog op."""
    if part.op == "const":
        return Leaf(ident, tuple(part.attrs["shape"]), tuple(float(x) for x in part.attrs["data"]), "autodiff", False)
    if part.op == "detach":
        return Cut(ident, "detach", inputs[0], region)
    return OpCall(ident, part.op, tuple(inputs), dict(part.attrs), region)


def expanded(program: Program, m: Mismatch, values: Mapping[str, TensorObs]) -> Program | None:
    """The statements of `program` before `m`'s backward, each op of `composites` replaced by its
    parts (the last keeping the op's id), then that backward: the program as burn computes it,
    nothing unshared. None when nothing is expanded or the result is no valid program."""
    table = program.by_id()
    bw = table.get(str(m.backward))
    ops = {st.id for st in composites(program, m, values)}
    if not isinstance(bw, Backward) or not ops:
        return None
    try:
        shapes = infer_shapes(program)
    except ProgramError:
        return None
    out: list[Statement] = []
    for st in program.statements[:program.statements.index(bw)]:
        parts = _parts(program, st, values, shapes) if isinstance(st, OpCall) and st.id in ops else None
        if not isinstance(st, OpCall) or parts is None:
            out.append(st)
            continue
        ids = [f"{st.id}_p{k}" for k in range(len(parts) - 1)] + [st.id]
        for ident, part in zip(ids, parts, strict=True):
            refs = [st.inputs[x] if isinstance(x, int) else ids[int(x[1:])] if x.startswith("p") else None
                    for x in part.inputs]
            if any(r is None for r in refs):
                return None
            out.append(part_statement(ident, part, [str(r) for r in refs], st.region))
    try:
        return program.with_statements((*out, bw))
    except ProgramError:
        return None


def composites(program: Program, m: Mismatch, values: Mapping[str, TensorObs]) -> list[OpCall]:
    """The op calls `unshared(program, m, values)` builds of their parts: every op on the way to
    `m`'s backward's root with a composition for its call."""
    table = program.by_id()
    bw = table.get(str(m.backward))
    if not isinstance(bw, Backward):
        return []
    try:
        shapes = infer_shapes(program)
    except ProgramError:
        return []
    up = ancestors(table, bw.input)
    return [s for s in program.statements if s.id in up and isinstance(s, OpCall)
            and _parts(program, s, values, shapes) is not None]


def _parts(program: Program, st: OpCall, values: Mapping[str, TensorObs],
           shapes: dict[str, Shape]) -> tuple[Part, ...] | None:
    """The parts burn builds the op call `st` of (its catalog entry's composition), None when it
    declares none for this call."""
    spec = CATALOG.get(st.op)
    if spec is None or spec.composed is None:
        return None
    try:
        known = [values.get(i) for i in st.inputs]
        data = [x.data for x in known if x is not None]
        call = Call(dict(st.attrs), [tuple(shapes[i]) for i in st.inputs], data if len(data) == len(known) else None,
                    value_dtypes(program).get(st.inputs[0], program.dtype))
        return spec.composed(call) or None
    except (ProgramError, ShapeError, ValueError, KeyError, IndexError, ZeroDivisionError):
        return None


class _TooLarge(Exception):
    pass


def unshared(program: Program, m: Mismatch, values: Mapping[str, TensorObs] | None = None) -> Program | None:
    """The forward of `m`'s backward as a tree (every value read through several paths computed
    once per path, each leaf copied per use) and that backward; None when `m` is no gradient of a
    backward, the root depends on anything but leaves, ops, cuts and module forwards (a parameter
    or gradient read), nothing in it is shared, or the tree would exceed MAX_STATEMENTS. Its
    values are the program's where nothing before the backward changed a leaf or a module in
    place (a step): the caller compares the roots (`same_root`).
    With `values` (burn's values of the program, by id), an op burn builds from others
    (difftest/ops/compositions.py) is built of its parts, each read of its inputs its own path:
    a composite that reads its input twice sums two contributions inside burn (silu is
    x * sigmoid(x)); a mask burn computes from the input is computed from `values`."""
    table = program.by_id()
    bw = table.get(str(m.backward))
    if m.kind != "grad" or not isinstance(bw, Backward):
        return None
    out: list[Statement] = []
    declared: set[str] = set()
    try:
        shapes = infer_shapes(program) if values is not None else {}
    except ProgramError:
        return None

    def emit(ident: str) -> str | None:
        st = table.get(ident)
        if len(out) >= MAX_STATEMENTS:
            raise _TooLarge
        if isinstance(st, Leaf):
            out.append(replace(st, id=f"u{len(out)}_{st.id}"))
            return out[-1].id
        if isinstance(st, OpCall):
            parts = _parts(program, st, values, shapes) if values is not None else None
            if parts is not None:
                return emit_part(st, parts, len(parts) - 1)
            inputs = [emit(i) for i in st.inputs]
            if any(i is None for i in inputs):
                return None
            out.append(replace(st, id=f"u{len(out)}_{st.id}", inputs=tuple(i for i in inputs if i is not None)))
            return out[-1].id
        if isinstance(st, Cut):
            source = emit(st.input)
            if source is None:
                return None
            out.append(replace(st, id=f"u{len(out)}_{st.id}", input=source))
            return out[-1].id
        if isinstance(st, Apply):
            # a module's forward once per path too; the module and its transforms are declared
            # once (its parameters stay shared: their gradients are not the leaf's)
            chain = module_chain(table, st.module)
            source = emit(st.input) if chain is not None else None
            if chain is None or source is None:
                return None
            out.extend(h for h in chain if h.id not in declared)
            declared.update(h.id for h in chain)
            out.append(replace(st, id=f"u{len(out)}_{st.id}", input=source))
            return out[-1].id
        return None

    def emit_part(st: OpCall, parts: tuple[Part, ...], k: int) -> str | None:
        part = parts[k]
        if len(out) >= MAX_STATEMENTS:
            raise _TooLarge
        inputs: list[str | None] = []
        for x in part.inputs:
            if isinstance(x, int):
                inputs.append(emit(st.inputs[x]))
            elif x.startswith("p"):
                inputs.append(emit_part(st, parts, int(x[1:])))
            else:
                return None  # a module's parameter or buffer
        if any(i is None for i in inputs):
            return None
        ident = f"u{len(out)}_{st.id}_p{k}"
        out.append(part_statement(ident, part, [str(i) for i in inputs], st.region))
        return ident

    try:
        root = emit(bw.input)
    except _TooLarge:
        return None
    leaves = {s.id for s in program.statements if isinstance(s, Leaf)} & ancestors(table, bw.input)
    copies = sum(isinstance(s, Leaf) and s.id.split("_", 1)[1] in leaves for s in out)
    if root is None or copies == len(leaves):
        return None  # nothing was read twice: the tree is the program itself
    try:
        return program.with_statements((*out, Backward("bw", root)))
    except ProgramError:
        return None
