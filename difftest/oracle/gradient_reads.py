"""Values made from a gradient read (`grad(x; bw)`) by ops that only move or select its elements.

Such a value holds the gradient's elements (or zeros), so what is true of the gradient is true
of it: the oracle's kink check judges an element of `narrow(grad(x; bw))` as the gradient's own
element (kinks.py), and triage bounds the error of `cummax(grad(x; bw))` by the gradient's terms
(findings/triage.py). The two ask different things of the ops in between, so the walk takes a
predicate: `placing` (the element each output element is does not depend on the values) and
`selecting` (each output element is one of the inputs', chosen perhaps by value).
"""

from __future__ import annotations

from collections.abc import Callable

from difftest.ops import tolerance as T
from difftest.ops.catalog import CATALOG
from difftest.program.ir import Cut, Grad, OpCall, Statement, ancestors

# op families whose output elements are elements of their one input, chosen whatever the values
# (a reshape, a narrow, a permute)
PLACING_FAMILIES = frozenset({"shape", "index"})


def placing(st: OpCall) -> bool:
    """An op of one input whose output elements are input elements at places its attributes
    alone fix (or zeros): running it on element numbers tells which element each one is."""
    spec = CATALOG.get(st.op)
    return spec is not None and spec.family in PLACING_FAMILIES and len(st.inputs) == 1


def selecting(st: OpCall) -> bool:
    """An op whose output elements are its inputs' elements, moved or chosen (tolerance class
    exact: cummax, gather, a reshape), never computed from them."""
    spec = CATALOG.get(st.op)
    return spec is not None and spec.tolerance is T.EXACT


def between_read(table: dict[str, Statement], ident: str | None, read: str,
                 admits: Callable[[OpCall], bool]) -> list[Statement] | None:
    """The statements that make `ident` from the gradient read `read`, in program order, when
    each is a cut or an op `admits` whose every input is made from the read (another input's
    elements are not the read's); [] when `ident` is the read; None otherwise."""
    if ident is None or read not in ancestors(table, ident):
        return None
    order = {x: i for i, x in enumerate(table)}
    between = sorted((x for x in ancestors(table, ident) if x != read and read in ancestors(table, x)),
                     key=lambda x: order.get(x, -1))
    out: list[Statement] = []
    for x in between:
        st = table[x]
        if isinstance(st, Cut):
            inputs: tuple[str, ...] = (st.input,)
        elif isinstance(st, OpCall) and admits(st):
            inputs = tuple(st.inputs)
        else:
            return None
        if any(read not in ancestors(table, i) for i in inputs):
            return None
        out.append(st)
    return out


def placing_read(table: dict[str, Statement], ident: str) -> tuple[Grad, list[Statement]] | None:
    """The gradient read `ident` is placed from (cuts and `placing` ops, at least one op), with
    the statements in between in program order; None when there is none."""
    for x in ancestors(table, ident):
        st = table.get(x)
        if isinstance(st, Grad):
            chain = between_read(table, ident, st.id, placing)
            if chain and any(isinstance(c, OpCall) for c in chain):
                return st, chain
    return None
