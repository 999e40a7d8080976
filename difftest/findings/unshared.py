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
"""

from __future__ import annotations

from dataclasses import replace

from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Backward, Cut, Leaf, OpCall, Program, ProgramError, Statement, ancestors

MAX_STATEMENTS = 64  # the tree of a small program; a larger one is not built


def right_unshared(v: Verdict | None) -> bool:
    """Whether the unshared program's verdict shows it right: it passes, and no mismatch of it was
    dismissed as ill-conditioned (a kink judgment, which the shared program need not be owed)."""
    return v is not None and v.ok and not any(m.verdict == "ill-conditioned" for m in v.dismissals)


class _TooLarge(Exception):
    pass


def unshared(program: Program, m: Mismatch) -> Program | None:
    """The forward of `m`'s backward as a tree (every value read through several paths computed
    once per path, each leaf copied per use) and that backward; None when `m` is no gradient of a
    backward, the root depends on anything but leaves, ops and cuts (module forwards, gradient
    reads), nothing in it is shared, or the tree would exceed MAX_STATEMENTS."""
    table = program.by_id()
    bw = table.get(str(m.backward))
    if m.kind != "grad" or not isinstance(bw, Backward):
        return None
    out: list[Statement] = []

    def emit(ident: str) -> str | None:
        st = table.get(ident)
        if len(out) >= MAX_STATEMENTS:
            raise _TooLarge
        if isinstance(st, Leaf):
            out.append(replace(st, id=f"u{len(out)}_{st.id}"))
            return out[-1].id
        if isinstance(st, OpCall):
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
        return None

    try:
        root = emit(bw.input)
    except _TooLarge:
        return None
    copies = sum(isinstance(s, Leaf) for s in out)
    leaves = {s.id for s in program.statements if isinstance(s, Leaf)} & ancestors(table, bw.input)
    if root is None or copies == len(leaves):
        return None  # nothing was read twice: the tree is the program itself
    try:
        return program.with_statements((*out, Backward("bw", root)))
    except ProgramError:
        return None
