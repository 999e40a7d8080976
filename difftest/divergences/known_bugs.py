"""Known burn bugs, as data: what triggers each, where its corpus case is, and the link.

The default strategy avoids generating a known bug's trigger (so property runs keep looking
for new ones); the bug itself stays covered by its corpus case, whose status `bug` makes the
replay fail loudly once burn fixes it (a strict xfail). Nothing else consults this table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from difftest.program.ir import Apply, Backward, Leaf, OpCall, Param, Statement, inputs_of


@dataclass(frozen=True)
class KnownBug:
    name: str
    summary: str
    case: str  # corpus path of the minimal case
    link: str | None
    triggers: Callable[[Statement, Sequence[Statement]], bool]  # (statement, the statements before it)


def _pow_zero(st: Statement, prior: Sequence[Statement]) -> bool:
    # powf_scalar with an integral exponent is dispatched to powi_scalar by burn
    return isinstance(st, OpCall) and st.op in ("powi_scalar", "powf_scalar") and st.attrs.get("exponent") == 0


def _backward_of_used_leaf(st: Statement, prior: Sequence[Statement]) -> bool:
    if not isinstance(st, Backward):
        return False
    root = next((s for s in prior if s.id == st.input), None)
    if isinstance(root, Param) and root.param == "bias":
        # a Linear's bias is burn's parameter leaf itself (a weight is read transposed): once
        # a module has been applied it may be a used leaf
        return any(isinstance(s, Apply) for s in prior)  # conservative: any module handle
    return isinstance(root, Leaf) and any(st.input in inputs_of(s) for s in prior)


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        "powi-zero-untracked",
        "x.powi_scalar(0) on a tracked tensor returns an untracked ones tensor: the dispatch "
        "layer's default float_powi_scalar short-circuits `0 => ones` before burn-autodiff's "
        "tracked PowiScalarZero node, so the gradient through it is missing (None, and "
        "backward of a loss that only depends on it panics) where PyTorch gives zeros.",
        "corpus/bugs/powi-zero-untracked.json",
        None,
        _pow_zero,
    ),
    KnownBug(
        "backward-of-used-leaf-panics",
        "backward() of a require-grad leaf that feeds a chain of ops over several leaves panics "
        "with 'graph tape has already been consumed' although nothing was consumed; PyTorch "
        "gives the leaf a gradient of ones. The generator does not take a leaf with consumers "
        "as the backward root.",
        "corpus/bugs/backward-of-used-leaf-panics.json",
        None,
        _backward_of_used_leaf,
    ),
)


def known_bug(st: Statement, prior: Sequence[Statement] = ()) -> KnownBug | None:
    for bug in KNOWN_BUGS:
        if bug.triggers(st, prior):
            return bug
    return None


def describe() -> list[dict[str, Any]]:
    return [{"name": b.name, "summary": b.summary, "case": b.case, "link": b.link} for b in KNOWN_BUGS]
