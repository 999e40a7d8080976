"""Kinks where both frameworks declare the same subgradient: there, it is the answer.

At a kink any value between the one-sided limits is a subgradient, and the kink check (kinks.py)
accepts a result between them: two frameworks may pick different ones, and a float32 input near
the kink may fall on either side of it. Where both frameworks declare the *same* convention
(relu'(0) = 0, abs'(0) = 0: CONVENTIONS in difftest/divergences/conventions.py, measured by
tests/differential/test_conventions.py) and every run has the op's input *exactly* at the point,
there is no choice left: the float64 reference, which PyTorch's autograd computes with that very
convention, is what burn's own declared convention gives too. A burn whose abs'(0) became 1 gives
a subgradient, and the hull accepted it; it is a departure from what burn declared, and from
PyTorch, that no documented divergence allows, so it stays a finding.

`agreed_point` says when that holds for a failing element: every op on its path whose float64
input is near a kink of its own sits exactly at such a point, at the same elements in PyTorch's
run, in burn's and in float64, and nowhere near its kink otherwise. Any other kink on the path
(an op whose conventions differ, a tie, an input near but not at the point) leaves the element
to the kink check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from difftest.divergences.conventions import CONVENTIONS
from difftest.ops.catalog import CATALOG
from difftest.oracle.compare import Mismatch, Verdict
from difftest.oracle.kinks import input_values, kink_ops_near

Point = Callable[[Sequence[torch.Tensor], Mapping[str, Any]], torch.Tensor]  # elementwise: at the point


def _at_zero(xs: Sequence[torch.Tensor], attrs: Mapping[str, Any]) -> torch.Tensor:
    return xs[0] == 0


# the point of each convention both frameworks declare alike, by the convention's name
_POINTS: dict[str, Point] = {"relu-at-zero": _at_zero, "abs-at-zero": _at_zero, "elu-at-zero": _at_zero}
AWAY = 1.0  # what an element at the point is replaced by, to ask the domain about the others


def _agreed() -> dict[str, tuple[str, Point]]:
    """op -> (convention, point) for the conventions of `_POINTS`, each checked to be declared
    and alike in both frameworks: a convention measured to differ is the kink check's again."""
    out: dict[str, tuple[str, Point]] = {}
    for c in CONVENTIONS:
        if c.name in _POINTS and c.torch_grads == c.burn_grads:
            out[c.op] = (c.name, _POINTS[c.name])
    return out


AGREED = _agreed()


def agreed_point(verdict: Verdict, m: Mismatch) -> str | None:
    """Why the float64 reference is the one answer for `m`'s elements (every kink on its path is
    exactly at a point of a convention both frameworks declare alike, in all three runs), or
    None (some kink on the path is not: the kink check decides)."""
    program, ref = verdict.program, verdict.reference
    if ref is None:
        return None
    found: list[str] = []
    for i, st, xs, attrs in kink_ops_near(program, ref, m, verdict.prediction.torch.modules):
        spec = CATALOG[st.op]
        if xs is None:
            return None
        if st.op not in AGREED:
            return None
        name, point = AGREED[st.op]
        at = point(xs, st.attrs)
        for obs in (verdict.burn, verdict.torch):
            own = input_values(obs, st)
            if own is None or [x.shape for x in own] != [x.shape for x in xs] or \
                    not torch.equal(point(own, st.attrs), at):
                return None
        away = [torch.where(at, torch.full_like(xs[0], AWAY), xs[0]), *xs[1:]]
        if not spec.domain.predicate(away, attrs):
            return None  # near the kink elsewhere, not at it
        found.append(f"{st.op} at statement {i} ({st.id}), {name}")
    if not found:
        return None
    return ("exactly at a kink where both frameworks declare the same subgradient ("
            + "; ".join(found) + "): the float64 reference is that convention's")
