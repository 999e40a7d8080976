"""Whether a gradient finding is a broadcast's (localise.py): a one-op program whose op is right
once the inputs it broadcasts implicitly are expanded first, and whether that fault is shared by
every broadcasting op or is the op's own.

burn-autodiff reduces a broadcast operand's gradient over the broadcast dims in one helper
(`broadcast_shape`, ops/base.rs) that every binary op calls; a fault there shows in every op that
broadcasts, and is one finding, named by the mechanism (`broadcast`). An op can also reduce its
own operand wrong (its backward passing the wrong shape, or scaling only when shapes differ):
that fault shows in that op alone, and naming the mechanism would send a maintainer to the
shared helper, which is right. The *witness* tells them apart: another broadcasting op (`add`,
`sub` for add itself) broadcasting the same input over the same dims. Where the witness fails
too the reduction is shared (`broadcast`); where it is right the op names the fault
(`own-broadcast`, signed `broadcast:<op>`).

An operand of lower rank is first given leading size-1 dims (difftest-burn's rank promotion,
burn's `unsqueeze`, a reshape), and only then broadcast. A wrong gradient of that reshape shows
as a broadcast fault in every op too, witness included; so the promotion is checked alone first
(`promotion`), and where it is wrong the finding is the reshape's, localised as any failing
program (localise.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import torch

from difftest.findings.one_op import cotangent
from difftest.ops.catalog import CATALOG
from difftest.program.ir import Backward, Leaf, OpCall, Program, ProgramError
from difftest.program.shapes import Shape, ShapeError

if TYPE_CHECKING:
    from difftest.oracle.compare import Verdict

SHARED, OWN = "broadcast", "own-broadcast"  # the two mechanisms (localisation.py)
WITNESS_OPS = ("add", "sub")  # the first that is not the op itself witnesses the shared reduction


class HasProgram(Protocol):
    """What the broadcast experiments read of a localisation."""

    @property
    def kind(self) -> str: ...

    @property
    def input(self) -> tuple[int, ...] | None: ...

    @property
    def program(self) -> Program | None: ...


def _explicit(p: Program) -> tuple[OpCall, list[Leaf], list[Shape]] | None:
    """The op of the one-op program `p` (`y`), its input leaves and the shape each would have
    without an implicit broadcast (OpSpec.partners.explicit); None when the op declares none."""
    table = p.by_id()
    st = table.get("y")
    spec = CATALOG.get(st.op) if isinstance(st, OpCall) else None
    if spec is None or spec.partners is None or spec.partners.explicit is None or not isinstance(st, OpCall):
        return None
    leaves = [table.get(i) for i in st.inputs]
    if not all(isinstance(x, Leaf) for x in leaves) or len(set(st.inputs)) < len(st.inputs):
        return None
    inputs = [x for x in leaves if isinstance(x, Leaf)]
    try:
        targets = spec.partners.explicit([x.shape for x in inputs])
    except ShapeError:
        return None
    return st, inputs, [tuple(t) for t in targets]


def without_broadcast(p: Program) -> tuple[Program, tuple[int, ...]] | None:
    """The one-op program `p` (one_op_program) with every input its op broadcasts implicitly
    expanded to its explicit shape (OpSpec.partners.explicit) as a leaf of its own, and the
    positions of the inputs so expanded; None when the op broadcasts none of its inputs (or
    declares no explicit shapes). The op computes the same; only the reduction of a broadcast
    operand's gradient over the broadcast dims is gone."""
    found = _explicit(p)
    if found is None:
        return None
    _, leaves, targets = found
    expanded = tuple(k for k, (x, t) in enumerate(zip(leaves, targets)) if tuple(x.shape) != t)
    if not expanded:
        return None
    new = {leaves[k].id: replace(leaves[k], shape=targets[k], data=_expanded_data(leaves[k], targets[k]))
           for k in expanded}
    try:
        return p.with_statements(tuple(new.get(s.id, s) for s in p.statements)), expanded
    except ProgramError:
        return None


def _expanded_data(leaf: Leaf, target: Shape) -> tuple[float, ...]:
    data = torch.tensor(leaf.data, dtype=torch.float64).reshape((1,) * (len(target) - len(leaf.shape)) + leaf.shape)
    return tuple(data.expand(target).reshape(-1).tolist())


def right_without_broadcast(loc: HasProgram, judge: Callable[[Program], Verdict | None]) -> tuple[int, ...]:
    """The inputs expanded (without_broadcast) when the gradient finding `loc` (a localisation:
    its kind and one-op program) is gone once they are: the op's own derivative is right, and
    the reduction of a broadcast operand's gradient is not; () otherwise."""
    if loc.kind != "grad" or loc.program is None:
        return ()
    variant = without_broadcast(loc.program)
    if variant is None:
        return ()
    p, expanded = variant
    v = judge(p)
    return expanded if v is not None and v.ok else ()


def witness(p: Program, k: int) -> Program | None:
    """Another op broadcasting input `k` of the one-op program `p` as `p`'s op does: the first of
    WITNESS_OPS that is not that op, of input `k` (its data, at its position if it is the first
    or second operand) and a constant leaf of the shape input `k` is broadcast to, seeded with a
    non-constant cotangent (one_op.cotangent) so that a reduction summing the wrong elements
    shows. None where `p` has no such input."""
    found = _explicit(p)
    if found is None or not 0 <= k < len(found[1]):
        return None
    st, leaves, targets = found
    x, target = leaves[k], targets[k]
    if not x.require_grad or tuple(x.shape) == target:
        return None
    name = next(o for o in WITNESS_OPS if o != st.op)
    n = 1
    for d in target:
        n *= d
    a = Leaf("a0", x.shape, x.data, x.device, True)
    c = Leaf("a1", target, cotangent(n), x.device, False)
    operands = ("a1", "a0") if k > 0 else ("a0", "a1")
    statements = (a, c, OpCall("y", name, operands), Leaf("s", target, cotangent(n)[::-1], x.device, False),
                  OpCall("z", "mul", ("y", "s")), Backward("bw", "z"))
    try:
        return p.with_statements(statements)
    except ProgramError:
        return None


def promotion(p: Program, k: int) -> Program | None:
    """Input `k` of the one-op program `p` given the leading size-1 dims of the shape its op
    broadcasts it to (a `reshape`), seeded with a non-constant cotangent: the rank promotion the
    op's broadcast starts with, alone. None where the input is of the target's rank already."""
    found = _explicit(p)
    if found is None or not 0 <= k < len(found[1]):
        return None
    _, leaves, targets = found
    x, target = leaves[k], targets[k]
    if not x.require_grad or len(x.shape) >= len(target):
        return None
    promoted = (1,) * (len(target) - len(x.shape)) + tuple(x.shape)
    n = len(x.data)
    statements = (Leaf("a0", x.shape, x.data, x.device, True),
                  OpCall("y", "reshape", ("a0",), {"shape": list(promoted)}),
                  Leaf("ct", promoted, cotangent(n), x.device, False), OpCall("z", "mul", ("y", "ct")),
                  Backward("bw", "z"))
    try:
        return p.with_statements(statements)
    except ProgramError:
        return None


def promotion_fails(loc: HasProgram, expanded: tuple[int, ...],
                    judge: Callable[[Program], Verdict | None]) -> Verdict | None:
    """The failing verdict of the rank promotion (`promotion`) of an expanded input whose gradient
    `loc` finds wrong, where that reshape alone gives a wrong gradient; None otherwise."""
    if loc.program is None:
        return None
    for k in _wrong_inputs(loc, expanded):
        q = promotion(loc.program, k)
        v = judge(q) if q is not None else None
        if v is not None and any(f.kind == "grad" and f.statement == "a0" for f in v.findings):
            return v
    return None


def _wrong_inputs(loc: HasProgram, expanded: tuple[int, ...]) -> list[int]:
    return [k for k in expanded if loc.input is None or k in loc.input] or list(expanded)


def shared(loc: HasProgram, expanded: tuple[int, ...], judge: Callable[[Program], Verdict | None]) -> bool:
    """Whether the broadcast fault of `loc` (right_without_broadcast gave `expanded`) shows in
    another op broadcasting the same input the same way (`witness`): a wrong gradient of the
    witness's input at any of the expanded inputs whose gradient `loc` finds wrong. False
    where no witness fails, or none can be built or run: the op then names the fault."""
    if loc.program is None:
        return False
    for k in _wrong_inputs(loc, expanded):
        w = witness(loc.program, k)
        v = judge(w) if w is not None else None
        if v is not None and not v.ok and any(
                f.kind == "grad" and f.statement == "a0" and f.verdict != "torch-wrong" for f in v.findings):
            return True
    return False

