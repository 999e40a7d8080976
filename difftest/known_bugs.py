"""Known burn bugs, as data: what triggers each, where its corpus case is, and the link.

The default strategy avoids generating a known bug's trigger (so property runs keep looking
for new ones); the bug itself stays covered by its corpus case, whose status `bug` makes the
replay fail loudly once burn fixes it (a strict xfail). Nothing else consults this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .ir import OpCall


@dataclass(frozen=True)
class KnownBug:
    name: str
    summary: str
    case: str  # corpus path of the minimal case
    link: str | None
    triggers: Callable[[OpCall], bool]


def _powi_zero(st: OpCall) -> bool:
    return st.op == "powi_scalar" and st.attrs.get("exponent") == 0


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        "powi-zero-untracked",
        "x.powi_scalar(0) on a tracked tensor returns an untracked ones tensor: the dispatch "
        "layer's default float_powi_scalar short-circuits `0 => ones` before burn-autodiff's "
        "tracked PowiScalarZero node, so the gradient through it is missing (None, and "
        "backward of a loss that only depends on it panics) where PyTorch gives zeros.",
        "corpus/bugs/powi-zero-untracked.json",
        None,
        _powi_zero,
    ),
)


def known_bug(st: OpCall) -> KnownBug | None:
    for bug in KNOWN_BUGS:
        if bug.triggers(st):
            return bug
    return None


def describe() -> list[dict[str, Any]]:
    return [{"name": b.name, "summary": b.summary, "case": b.case, "link": b.link} for b in KNOWN_BUGS]
