"""Whether a gradient finding is burn's summation of a value's contributions: the experiments of
difftest/findings/unshared.py run through the localiser's judge (localise.py asks them of an op
that fails reading one value twice, of a `graph` gradient, and before it names a suspect)."""

from __future__ import annotations

from collections.abc import Callable

from difftest.findings.composed import computed_as_parts
from difftest.findings.unshared import composites, expanded, right_unshared, same_root, summed_apart, unshared
from difftest.oracle.compare import Mismatch, Verdict
from difftest.program.ir import Backward, Program, Statement

Judge = Callable[[Program], Verdict | None]  # a program's verdict (None: it could not be checked)


def accumulates(verdict: Verdict, m: Mismatch, judge: Judge, proved: bool = False) -> bool:
    """Whether the gradient finding `m` of `verdict` is burn's summation of a shared value's
    contributions: the program as a tree computes the same root and passes, or burn's gradient
    of the leaf is not the sum of the gradients burn gives its copies there; the tree built
    through the composites' parts second (where burn computes each as its parts). `proved`: the
    sum only (a tree that passes may hold a fault within its budgets)."""
    plain = unshared(verdict.program, m)
    values = {o.id: o.value for o in verdict.burn.values}
    composed = unshared(verdict.program, m, values)
    if composed is not None and composed != plain and not all(
            computed_as_parts(verdict.program, st, values, judge) for st in composites(verdict.program, m, values)):
        composed = None  # burn does not compute some composite as its parts here
    for tree in (plain, composed if composed != plain else None):
        if tree is None:
            continue
        tree_verdict = judge(tree)
        if not same_root(verdict, m, tree, tree_verdict):
            continue
        if not proved and right_unshared(tree_verdict):
            return True
        # PyTorch's rounding of the sum, measured on the program with the same parts
        whole = expanded(verdict.program, m, values) if tree is composed else None
        if summed_apart(verdict, m, tree, tree_verdict, judge(whole) if whole is not None else None):
            return True
    return False


def rerooted_finding(program: Program, m: Mismatch, shown: Statement, judge: Judge) -> tuple[Verdict, Mismatch] | None:
    """`program` with `m`'s backward rooted at `shown` (graph_roots.smallest_root), and its
    finding of `m`'s kind at `m`'s leaf; None when that is the program itself or it has none."""
    bw = program.by_id().get(str(m.backward))
    if not isinstance(bw, Backward) or bw.input == shown.id:
        return None
    v = judge(program.rerooted(program.statements.index(bw), shown.id))
    f = next((f for f in v.findings if f.kind == m.kind and f.statement == m.statement), None) if v else None
    return (v, f) if v is not None and f is not None else None
