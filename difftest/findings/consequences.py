"""Whether a finding is only the consequence of a wrong gradient the program read earlier.

A session reads gradients (`g = grad(x; bw)`) and computes on: `div(g, y)`, a backward of that,
the gradient of y it gives. When x's gradient is wrong by a known bug, every value computed from
g is wrong too, and no op on the way is at fault. Rather than trusting a record to reach that
far (a record that matched every wrong number downstream of its site would hide a second bug
there), the program is run again with each such read replaced by a leaf holding the value burn
read: the same computation on both sides from burn's own numbers. A finding that is gone then
was the read's consequence; one that stays is news of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from difftest.findings.paths import upstream
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Grad, Leaf, Program, ProgramError, Statement


def with_reads_as_leaves(verdict: Verdict, reads: Collection[str]) -> Program | None:
    """The verdict's program with each gradient read in `reads` a leaf of the value burn read
    (on the device burn had it on, not requiring grad); None when burn read none of them or the
    result is no valid program."""
    program = verdict.program
    out: list[Statement] = []
    replaced = False
    for st in program.statements:
        obs = verdict.burn.value(st.id) if isinstance(st, Grad) and st.id in reads else None
        if obs is None:
            out.append(st)
            continue
        on_autodiff = obs.flags.get("is_autodiff", False)
        out.append(Leaf(st.id, obs.value.shape, obs.value.data, "autodiff" if on_autodiff else "plain", False))
        replaced = True
    if not replaced:
        return None
    try:
        return program.with_statements(tuple(out))
    except (ProgramError, ValueError):
        return None


def consequence(verdict: Verdict, m: Mismatch, explained: Collection[tuple[str, str]],
                judge: Callable[[Program], Verdict | None]) -> bool:
    """Whether the value or gradient finding `m` is the consequence of gradient reads whose
    gradient a known bug explains (`explained`: (value, backward) pairs): the reads it is
    computed from replaced by burn's values, the program no longer shows it."""
    if m.kind not in ("value", "grad"):
        return False
    table = verdict.program.by_id()
    start = table.get((m.backward if m.kind == "grad" else m.statement) or "")
    reads = {x for x in upstream(table, start)
             if isinstance(g := table.get(x), Grad) and (g.of, g.grads) in explained} if start else set()
    if not reads:
        return False
    variant = with_reads_as_leaves(verdict, reads)
    v = judge(variant) if variant is not None else None
    if v is None:
        return False
    return not any(f.kind == m.kind and f.statement == m.statement and f.backward == m.backward
                   for f in v.findings)
