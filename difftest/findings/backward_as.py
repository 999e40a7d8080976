"""An op's wrong gradient traced to the forward kernel burn computes it with (localise.py).

Where burn-autodiff hands an op's cotangent to a backend kernel that is also another op's
forward (the catalog entry's `backward_kernel`, ops/backward_kernels.py: `select`'s gradient
is `select_assign` of the cotangent into zeros), a fault in that kernel is one bug that shows in
both ops: the gradient of the one and the value of the other. Given an op's failing one-op
program, the declared forward is run on a fixed cotangent (one_op.cotangent), its inputs
constants. Where that forward is wrong too and burn's gradient of the op's input, seeded with the
same cotangent, is exactly the forward's result, the finding is the forward op's, localised and
signed as its own forward fault is (`select_assign:forward`): one case for the kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from difftest.findings.composed import close
from difftest.findings.one_op import HARNESS_OP, cotangent
from difftest.findings.unshared import part_statement
from difftest.ops.catalog import CATALOG
from difftest.ops.validate import infer_shapes
from difftest.program.ir import Backward, Leaf, OpCall, Program, ProgramError, Statement
from difftest.program.parts import Call
from difftest.program.shapes import ShapeError

if TYPE_CHECKING:
    from difftest.findings.localisation import Localisation
    from difftest.oracle.compare import Mismatch, Verdict

ROOT = "y"  # the kernel program's result: the op's input-0 gradient, as a value


def kernel_programs(p: Program) -> tuple[Program, Program] | None:
    """For the one-op program `p` of an op that declares a backward kernel: (the op seeded with
    the fixed cotangent, its input 0 a tracked leaf and the others as `p` has them; the kernel's
    forward on that cotangent, every input a constant). None where the op declares none or the
    programs cannot be built."""
    table = p.by_id()
    st = table.get(ROOT)
    spec = CATALOG.get(st.op) if isinstance(st, OpCall) else None
    if not isinstance(st, OpCall) or spec is None or spec.backward_kernel is None:
        return None
    x = table.get(st.inputs[0])
    if not isinstance(x, Leaf) or st.inputs.count(x.id) > 1:
        return None
    try:
        shapes = infer_shapes(p)
        out = tuple(shapes[ROOT])
        # the op's inputs' data: a kernel whose indices burn computes from the input (cummax's sources)
        data = [x.data for i in st.inputs if isinstance(x := p.by_id().get(i), Leaf)]
        parts = spec.backward_kernel(Call(dict(st.attrs), [tuple(shapes[i]) for i in st.inputs],
                                          data if len(data) == len(st.inputs) else None, p.dtype))
    except (ProgramError, ShapeError, ValueError, KeyError, IndexError):
        return None
    if not parts:
        return None
    g = cotangent(math.prod(out))
    inputs = [s for s in p.statements if isinstance(s, Leaf) and s.id in st.inputs]
    leaves = [Leaf(s.id, s.shape, s.data, "autodiff", s.id == x.id) for s in inputs]
    seeded: tuple[Statement, ...] = (*leaves, st, Leaf("ct", out, g, "autodiff", False),
                                     OpCall("z", HARNESS_OP, (ROOT, "ct")), Backward("bw", "z"))
    ids = [f"{ROOT}_p{k}" for k in range(len(parts) - 1)] + [ROOT]
    statements: list[Statement] = [Leaf("g", out, g, "autodiff", False)]
    for k, part in enumerate(parts):
        refs = ["g" if isinstance(r, int) else ids[int(r[1:])] for r in part.inputs]
        statements.append(part_statement(ids[k], part, refs, "grad"))
    try:
        return (Program(seeded, p.dtype, p.checkpointing), Program(tuple(statements), p.dtype, p.checkpointing))
    except ProgramError:
        return None


def kernel_fault(found: Localisation, judge: Callable[[Program], Verdict | None],
                 localise: Callable[[Verdict, Mismatch], Localisation | None]) -> Localisation | None:
    """The localisation of the forward op that the op of `found` (a gradient finding of an op's
    one-op program, at its input 0) computes that gradient with, where that forward is wrong on
    the cotangent and burn's seeded gradient is its result; None otherwise."""
    if found.kind != "grad" or found.program is None or (found.input is not None and 0 not in found.input):
        return None
    built = kernel_programs(found.program)
    if built is None:
        return None
    seeded, kernel = built
    vk = judge(kernel)
    wrong = [f for f in vk.findings if f.kind == "value"] if vk is not None else []
    if vk is None or not wrong:
        return None
    vs = judge(seeded)
    result = vk.burn.value(ROOT)
    x = next(s for s in seeded.statements if isinstance(s, Leaf) and s.require_grad)
    grad = vs.burn.backwards[-1].grads.get(x.id) if vs is not None and vs.burn.backwards else None
    if grad is None or result is None or not close(grad, result.value, kernel.dtype):
        return None  # burn computes the gradient otherwise than the declared kernel does
    loc = localise(vk, wrong[0])
    if loc is None or loc.where == "graph":
        return None
    # the op whose backward showed it, recorded as a composite a part was found in is
    return replace(loc, inside=(f"{found.where}'s backward", *loc.inside))
