"""Subgradient conventions at non-differentiable points, found by running, kept as data.

At a kink or a tie both frameworks return *a* subgradient, but not always the same one. The
generator keeps inputs away from these points (see each op's domain in domains.py), and when
a program lands on one anyway the float64 finite-difference check sees different left and
right slopes and classifies the disagreement `ill-conditioned`, not a finding.

Each entry records what each framework returns at the point (burn 0.22.1, PyTorch 2.15);
`tests/test_conventions.py` re-measures them, so an entry that stops matching either framework
fails like a stale rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Convention:
    name: str
    op: str
    inputs: tuple[tuple[float, ...], ...]  # one flat rank-1 input per operand
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    torch_grads: tuple[tuple[float, ...], ...] = ()  # per operand, of sum(op(inputs))
    burn_grads: tuple[tuple[float, ...], ...] = ()
    note: str = ""


CONVENTIONS: tuple[Convention, ...] = (
    Convention("leaky-relu-at-zero", "leaky_relu", ((0.0, 1.0),), {"slope": 0.125},
               ((0.125, 1.0),), ((1.0, 1.0),), "at 0 PyTorch takes the negative slope, burn the positive one"),
    Convention("maximum-tie", "maximum", ((1.0, 2.0), (1.0, 3.0)), {},
               ((0.5, 0.0), (0.5, 1.0)), ((1.0, 0.0), (0.0, 1.0)), "PyTorch splits a tie, burn gives it to the first"),
    Convention("minimum-tie", "minimum", ((1.0, 2.0), (1.0, 3.0)), {},
               ((0.5, 1.0), (0.5, 0.0)), ((1.0, 1.0), (0.0, 0.0)), "PyTorch splits a tie, burn gives it to the first"),
    Convention("max-tie", "max", ((2.0, 2.0, 1.0),), {},
               ((0.5, 0.5, 0.0),), ((1.0, 0.0, 0.0),), "full max: PyTorch spreads over ties, burn picks one"),
    Convention("min-tie", "min", ((1.0, 1.0, 2.0),), {},
               ((0.5, 0.5, 0.0),), ((1.0, 0.0, 0.0),), "full min: PyTorch spreads over ties, burn picks one"),
    Convention("clamp-at-bounds", "clamp", ((-0.5, 0.5, 0.0),), {"min": -0.5, "max": 0.5},
               ((0.0, 0.0, 1.0),), ((1.0, 1.0, 1.0),), "at a bound PyTorch's gradient is 0, burn's 1"),
    Convention("clamp-min-at-bound", "clamp_min", ((-0.5, 0.5),), {"min": -0.5},
               ((0.0, 1.0),), ((1.0, 1.0),), "at the bound PyTorch's gradient is 0, burn's 1"),
    Convention("clamp-max-at-bound", "clamp_max", ((-0.5, 0.5),), {"max": 0.5},
               ((1.0, 0.0),), ((1.0, 1.0),), "at the bound PyTorch's gradient is 0, burn's 1"),
    # the same at both: kept so a change on either side is noticed
    Convention("relu-at-zero", "relu", ((0.0, 1.0),), {}, ((0.0, 1.0),), ((0.0, 1.0),), "both 0"),
    Convention("abs-at-zero", "abs", ((0.0, 1.0),), {}, ((0.0, 1.0),), ((0.0, 1.0),), "both 0"),
    Convention("max-dim-tie", "max_dim", ((2.0, 2.0, 1.0),), {"dim": 0},
               ((1.0, 0.0, 0.0),), ((1.0, 0.0, 0.0),), "both give the tie to the first index"),
)
