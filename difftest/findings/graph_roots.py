"""Where a gradient that no single op explains first shows (localise.py names such a finding
`graph`): the op nearest the leaf on the gradient's path whose result, made the backward's root
(the failing backward's root probe, difftest/oracle/probes.py), already gives the leaf a wrong
gradient. A composition bug of the backward (a layout two backwards make together, a fused
kernel) is signed by that op (`graph@<op>`, triage.py), as a wrong value no single op makes is
signed by the op that shows it: two such bugs are two cases, and one bug seen through different
downstream ops is one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Apply, Backward, OpCall, Program, Statement, root_module

Judge = Callable[[Program], Verdict | None]  # a program's verdict (None: it could not be checked)


def smallest_root(program: Program, m: Mismatch, path: Sequence[Statement], judge: Judge) -> Statement | None:
    """Of `path` (the ops and module applies on the gradient's path, in program order), the
    first whose result as the root of `m`'s backward gives the leaf `m.statement` a finding of
    `m`'s kind; the backward's own root when none before it does; None when `m` is no gradient
    finding of a backward of `program` or its root is not on the path."""
    table = program.by_id()
    bw = table.get(str(m.backward))
    if m.kind not in ("grad", "grad-presence") or not isinstance(bw, Backward):
        return None
    index = program.statements.index(bw)
    own = next((st for st in path if st.id == bw.input), None)
    for st in path:
        if st is own:
            break
        v = judge(program.rerooted(index, st.id))
        if v is not None and any(f.kind == m.kind and f.statement == m.statement for f in v.findings):
            return st
    return own


def shown_name(program: Program, st: Statement) -> str:
    """How a signature names the op a finding shows at: its catalog op, or `apply:<kind>` for a
    module's forward (`apply:?` when the handle's module cannot be found)."""
    if isinstance(st, OpCall):
        return st.op
    if isinstance(st, Apply):
        try:
            return f"apply:{root_module(program, st.module).module}"
        except (KeyError, AssertionError):
            return "apply:?"
    return type(st).__name__.lower()
