"""Float64 finite differences of a program, the evidence for decisions autodiff cannot make on
its own: the derivative of L = sum(root) with respect to one element of a leaf (a wrong gradient,
a kink), and a value's one-sided limits when every leaf moves a little (a jump).

Both differentiate what autodiff differentiates: every value that does not carry the leaf's
gradient key in the model's prediction (values behind detach, without_autodiff, no_grad /
inference_mode regions, valid() modules) is held constant at its unperturbed value.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from difftest.oracle.compare import Verdict
from difftest.oracle.pytorch import run as run_torch
from difftest.oracle.sites import OpSite, SiteHooks
from difftest.program.ir import Apply, Backward, Leaf, Program, Statement, is_value
from difftest.program.modules import module_kind
from difftest.program.observation import TensorObs
from difftest.program.statements import root_module

FD_STEPS = (1e-4, 1e-5)
F64_EPS = 2.0 ** -52
VALUE_STEPS = (1e-6, 1e-4)  # relative moves of every leaf for a value's one-sided limits


class FreezeHooks(SiteHooks):
    """Site hooks that hold the given values constant (what autodiff does not differentiate)."""

    def __init__(self, constants: dict[str, torch.Tensor]) -> None:
        self.constants = constants

    def constant(self, st: Statement) -> torch.Tensor | None:
        c = self.constants.get(st.id)
        return c.clone() if c is not None else None

    def on_site(self, site: OpSite, inputs: Any, compute: Any) -> torch.Tensor:
        out: torch.Tensor = compute(inputs)
        return out


def frozen_values(verdict: Verdict, leaf: Leaf, prefix: tuple[Statement, ...]) -> set[str]:
    """Values that do not carry `leaf`'s gradient in PyTorch's predicted graph: constants for
    the derivative autodiff computes (the model applies every cut, region and module rule)."""
    states = verdict.prediction.torch.states
    out = set()
    for st in prefix:
        if not is_value(st) or st.id == leaf.id:
            continue
        s = states.get(st.id)
        if s is None or leaf.id not in s.sources:
            out.add(st.id)
    return out


def as_tensor(t: TensorObs) -> torch.Tensor:
    """An observed tensor as a float64 torch tensor of its shape."""
    return torch.tensor(t.data, dtype=torch.float64).reshape(t.shape)


NEAR_REL, NEAR_ABS = 1e-3, 1e-6  # how closely two finite-difference estimates can be told apart


def near(a: float, b: float) -> bool:
    return abs(a - b) <= NEAR_REL * (abs(a) + abs(b)) + NEAR_ABS


def estimate_error(values: list[float]) -> float:
    """How far finite-difference estimates of about these magnitudes may lie from what they
    estimate (truncation at the step, rounding of the float64 loss): the resolution `near`
    works at. A one-sided difference of step h misses its limit by about h * |f''| / 2, so a
    subgradient exactly at a one-sided limit (relu's 1, a tie's whole gradient) can lie a
    little outside the estimated limit."""
    return NEAR_REL * max((abs(x) for x in values), default=0.0) + NEAR_ABS


@dataclass
class _LeafRuns:
    """What every finite difference of one leaf's gradient in one verdict shares: the values
    held constant and the unperturbed loss (both the same whichever element moves), and the
    results made so far, by element (arbitration asks for the same element again: the kink
    check, then the evidence of the worst element)."""

    verdict: Verdict  # held, so its identity is not reused while the entry lives
    key: tuple[str, str, bool]  # (leaf, backward, freeze)
    hooks: FreezeHooks
    frozen: list[str]
    l0: float
    done: dict[int, dict[str, Any]] = field(default_factory=dict)


_last: _LeafRuns | None = None  # one entry: a verdict's differences of one leaf come one after another


def finite_difference(verdict: Verdict, leaf_id: str, backward_id: str, element: int,
                      *, freeze: bool = True) -> dict[str, Any] | None:
    """Central differences of L = sum(root) in float64 with respect to one element of a leaf,
    the values that autodiff treats as constants held fixed (`freeze=False` only for tests), and
    the one-sided differences of the smallest step (`one_sided`: right, left). Each call returns
    a dict of its own (callers add to it)."""
    global _last
    program = verdict.program
    by_id = program.by_id()
    leaf, bw = by_id.get(leaf_id), by_id.get(backward_id)
    if not isinstance(leaf, Leaf) or not isinstance(bw, Backward) or element >= len(leaf.data):
        return None
    prefix = program.statements[: program.statements.index(bw)]

    def loss(x: float, hooks: FreezeHooks) -> float:
        data = list(leaf.data)
        data[element] = x
        stmts = tuple(replace(s, data=tuple(data)) if s is leaf else s for s in prefix)
        v = run_torch(Program(stmts, "float64"), "float64", hooks=hooks).value(bw.input)
        return math.fsum(v.value.data) if v else math.nan

    key = (leaf_id, backward_id, freeze)
    runs = _last if _last is not None and _last.verdict is verdict and _last.key == key else None
    if runs is None:
        # float64 programs: the perturbed data need not be values of the program's dtype
        base = run_torch(Program(prefix, "float64"), "float64")
        constants: dict[str, torch.Tensor] = {}
        if freeze:
            for ident in frozen_values(verdict, leaf, prefix):
                v = base.value(ident)
                if v is not None:
                    constants[ident] = as_tensor(v.value)
        hooks = FreezeHooks(constants)
        runs = _last = _LeafRuns(verdict, key, hooks, sorted(constants), loss(leaf.data[element], hooks))
    if element not in runs.done:
        d = _differences(leaf.data[element], runs.l0, lambda x: loss(x, runs.hooks))
        runs.done[element] = {"element": element, **{k: d[k] for k in ("steps", "estimates", "one_sided", "smooth")},
                              "frozen": runs.frozen, "rounding": d["rounding"]}
    return copy.deepcopy(runs.done[element])


def _differences(x0: float, l0: float, loss: Callable[[float], float]) -> dict[str, Any]:
    """The central differences of `loss` at `x0` (whose loss is `l0`) for each of FD_STEPS,
    the one-sided ones of the smallest step, whether they agree, and how far the float64
    rounding of the losses alone may move an estimate."""
    scale = max(abs(x0), 1.0)
    estimates: list[float] = []
    one_sided = (math.nan, math.nan)
    rounding = 0.0
    for h in FD_STEPS:
        step = h * scale
        lp, lm = loss(x0 + step), loss(x0 - step)
        estimates.append((lp - lm) / (2 * step))
        one_sided = ((lp - l0) / step, (l0 - lm) / step)
        rounding = max(rounding, 2 * F64_EPS * max(abs(lp), abs(lm), abs(l0)) / step)

    values = [*estimates, *one_sided]
    smooth = all(math.isfinite(e) for e in values) and near(estimates[0], estimates[1]) and near(*one_sided)
    return {"steps": list(FD_STEPS), "estimates": estimates, "one_sided": list(one_sided),
            "smooth": smooth, "rounding": rounding}


def _index_leaves(program: Program) -> set[str]:
    """Leaves that are indices (an embedding's input): data, never moved."""
    by_id = program.by_id()
    return {st.input for st in program.statements
            if isinstance(st, Apply)
            and module_kind(root_module(program, st.module, by_id).module).index_bound is not None}


def value_sides(program: Program, statement: str, element: int, spread: bool = False,
                steps: tuple[float, ...] = VALUE_STEPS) -> list[tuple[float, float, float]]:
    """The float64 value of one element when every leaf moves by -step and +step (relative, at
    least that much absolute), for each of `steps`: (left, right, step) triples. A value
    whose left and right differences disagree sits at a kink or a jump. `spread`: each leaf
    element moves by its own multiple of the step (1 to 2, fixed per position), so that equal
    elements of different leaves part, in one order on one side and the other on the other:
    a value computed from a gradient read jumps where a tie of two leaves' elements (which
    moving them alike keeps) decides where the gradient goes."""
    fixed = _index_leaves(program)
    leaves = [s.id for s in program.statements if isinstance(s, Leaf)]

    def factor(leaf: str, i: int) -> float:
        return 1.0 + ((leaves.index(leaf) * 0.381966 + i * 0.618034) % 1.0) if spread else 1.0

    out = []
    for h in steps:
        sides = []
        for sign in (-1.0, 1.0):
            stmts = tuple(replace(s, data=tuple(x + sign * h * factor(s.id, i) * max(abs(x), 1.0)
                                                for i, x in enumerate(s.data)))
                          if isinstance(s, Leaf) and s.id not in fixed else s for s in program.statements)
            v = run_torch(Program(stmts, "float64"), "float64").value(statement)
            sides.append(v.value.data[element] if v is not None and element < len(v.value.data) else math.nan)
        out.append((sides[0], sides[1], h))
    return out
